"""The kimi-yarn drafter (kimi_dflash_lab/yarn_drafter.py): z-lab's YaRN rope fields, attention tuned to the RoPE
amplitude z-lab's drafters were trained with. Its proposals, computed without vLLM through the transcription of
vLLM's DFlash forward (demo_reference.py) at both amplitudes, show what the served proof measures."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="needs the cpu extra (launchers/setup-cpu.sh)")
pytest.importorskip("torch", reason="needs the cpu extra (launchers/setup-cpu.sh)")

import torch

from kimi_dflash.demo import ensure_demo_models, geometry
from kimi_dflash.demo.fabricate import Fabrication
from kimi_dflash.demo.kimi import fabricate as kimi_fabricate
from kimi_dflash.demo.kimi import layout, target
from kimi_dflash.launch.drafter_rope import concerned
from kimi_dflash_lab import yarn_drafter
from kimi_dflash_lab.demo_reference import DrafterReference

K = 4
ZLAB = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())


@pytest.fixture(scope="module")
def base() -> Fabrication:
    return kimi_fabricate.fabricate()


def reference(base: Fabrication, amplitude: float) -> DrafterReference:
    walk = base.walk
    config = json.loads(json.dumps(yarn_drafter.yarn_drafter_config(walk, base.mask_token_id)))
    weights = {name: torch.from_numpy(value).float() for name, value in yarn_drafter.yarn_drafter_weights(walk).items()}
    return DrafterReference(
        weights,
        config,
        torch.from_numpy(target.embeddings(walk)).float(),
        torch.from_numpy(target.lm_head(walk)).float(),
        rope_amplitude=amplitude,
    )


def accepted(drafter: DrafterReference, base: Fabrication, context: int, phases: list[int]) -> np.ndarray:
    """Share of anchors whose first k proposals are all the target's tokens, k = 1..K (vLLM's prefix rule)."""
    walk = base.walk
    features = torch.randn(context, layout.HIDDEN_SIZE * len(layout.TARGET_LAYER_IDS), generator=torch.manual_seed(0))
    right = np.zeros(K)
    for phase in phases:
        drafts = drafter.propose(features, walk.cycle[phase], K)
        truth = [walk.cycle[(phase + j) % walk.length] for j in range(1, K + 1)]
        right += np.cumprod([d == t for d, t in zip(drafts, truth, strict=True)])
    return right / len(phases)


def test_it_carries_zlab_rope_fields_which_the_launchers_fix_concerns(base: Fabrication) -> None:
    config = yarn_drafter.yarn_drafter_config(base.walk, base.mask_token_id)
    assert config["rope_scaling"] == ZLAB["rope_scaling"] == yarn_drafter.DRAFTER_ROPE_SCALING
    assert concerned(config)
    assert pytest.approx(1.4158883083359672) == yarn_drafter.TRAINED_AMPLITUDE


def test_the_fallback_context_lengths_bracket_the_demo() -> None:
    """At amplitude 1.0 the fallback wins inside a short conversation; at the trained one never within the demo's
    MAX_MODEL_LEN (4096, configs/demo-cpu.env)."""
    assert 100 < yarn_drafter.crossover_context(1.0) < 250
    assert yarn_drafter.crossover_context(yarn_drafter.TRAINED_AMPLITUDE) > 3 * 4096
    assert yarn_drafter.attention_share(4096, yarn_drafter.TRAINED_AMPLITUDE) > 0.99


def test_the_positional_patterns_sit_on_pairs_yarn_leaves_alone() -> None:
    pairs = yarn_drafter.unscaled_pairs(kimi_fabricate.KIMI_DRAFTER)
    assert list(pairs) == list(range(14))  # head_dim 96, theta 50000, original max 4096, beta_fast 32
    scaled = yarn_drafter.yarn_frequencies(96, 50000.0, yarn_drafter.DRAFTER_ROPE_SCALING)
    assert scaled[-1] == pytest.approx(geometry.rope_frequencies(96, 50000.0)[-1] / 64)


def test_its_guesses_need_the_trained_amplitude_once_the_context_grows(base: Fabrication) -> None:
    phases = [int(p) for p in np.random.default_rng(1).choice(base.walk.length, 24, replace=False)]
    trained = reference(base, yarn_drafter.TRAINED_AMPLITUDE)
    changed = reference(base, 1.0)
    expected = np.array(base.walk.acceptance_profile(K))
    with_fix = {context: accepted(trained, base, context, phases) for context in (20, 600)}  # each computed once
    for context, share in with_fix.items():
        assert np.all(np.abs(share - expected) < 0.25), (context, share)  # the walk's misses only
    assert np.all(accepted(changed, base, 20, phases) == with_fix[20])  # short: both alike
    without_fix = accepted(changed, base, 600, phases)
    assert np.all(without_fix == 0.0), without_fix  # long: the fallback guess at every position
    assert np.all(with_fix[600] >= without_fix + 0.3)


def test_the_bundle_holds_the_target_and_this_drafter(tmp_path) -> None:
    target_dir, drafter_dir = yarn_drafter.ensure_yarn_models(tmp_path)
    bundle = tmp_path.resolve() / "kimi-yarn"
    assert (target_dir, drafter_dir) == (bundle / "target", bundle / "drafter")
    assert sorted(p.name for p in bundle.iterdir()) == ["drafter", "manifest.json", "target"]
    config = json.loads((drafter_dir / "config.json").read_text())
    assert config["rope_scaling"] == yarn_drafter.DRAFTER_ROPE_SCALING and config["torch_dtype"] == "float32"
    summary = json.loads((bundle / "manifest.json").read_text())["summary"]
    assert summary["fallback_context_tokens"]["amplitude 1.0"] < 250
    kimi = ensure_demo_models(tmp_path)  # the target is the miniature Kimi's, byte for byte
    assert (target_dir / "model-00001-of-00002.safetensors").read_bytes() == (
        kimi.target_dir / "model-00001-of-00002.safetensors"
    ).read_bytes()


def test_the_study_serves_it_through_model_dir_from_the_demo_config(tmp_path, monkeypatch) -> None:
    """FABRICATE_DEMO_MODELS has no kimi-yarn choice: the drafter-rope study (and its server test) serve the bundle
    as MODEL_DIR / DRAFT_MODEL_DIR over configs/demo-cpu.env, which must validate as such."""
    from kimi_dflash.config.validate import load_config
    from kimi_dflash_lab.studies.drafter_rope import CONFIG, REPO, served_models

    monkeypatch.setenv("KIMI_DFLASH_CACHE", str(tmp_path))
    environ = served_models()
    config = load_config(REPO / CONFIG, environ)
    assert config.demo_models is None and config.typed.speculative_method == "dflash"
    assert config.typed.model_dir == tmp_path.resolve() / "demo" / "kimi-yarn" / "target"
    assert config.typed.draft_model_dir == tmp_path.resolve() / "demo" / "kimi-yarn" / "drafter"
    assert (
        json.loads((config.typed.draft_model_dir / "config.json").read_text())["rope_scaling"] == ZLAB["rope_scaling"]
    )


def test_the_committed_summary_names_how_the_study_serves_the_bundle() -> None:
    from kimi_dflash_lab.studies.drafter_rope import REPO, SERVED_AS

    summary = json.loads((REPO / "benchmarks" / "results" / "drafter-rope" / "summary.json").read_text())
    assert summary["config"] == SERVED_AS
