"""The lab's yarn drafters (kimi_dflash_lab/yarn_drafter.py): z-lab's YaRN rope fields, attention built for the
legacy RoPE amplitude (1.4159, kimi-yarn) or for 1.0 (kimi-yarn-unit). Their proposals, computed without vLLM through
the transcription of vLLM's DFlash forward (demo_reference.py) at both amplitudes, show what the served study
measures: each is accepted best at its own amplitude."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="needs the cpu extra (launchers/setup-cpu.sh)")
pytest.importorskip("torch", reason="needs the cpu extra (launchers/setup-cpu.sh)")

import torch

from kimi_dflash.checkpoint import facts_from_config
from kimi_dflash.demo import ensure_demo_models, geometry
from kimi_dflash.demo.fabricate import Fabrication
from kimi_dflash.demo.kimi import fabricate as kimi_fabricate
from kimi_dflash.demo.kimi import layout, target
from kimi_dflash.rules.rope_amplitude import concerned
from kimi_dflash_lab import yarn_drafter
from kimi_dflash_lab.demo_reference import DrafterReference

K = 4
ZLAB = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())


@pytest.fixture(scope="module")
def base() -> Fabrication:
    return kimi_fabricate.fabricate()


def reference(
    base: Fabrication, amplitude: float, drafter: yarn_drafter.YarnDrafter = yarn_drafter.LEGACY_DRAFTER
) -> DrafterReference:
    walk = base.walk
    config = json.loads(json.dumps(yarn_drafter.yarn_drafter_config(walk, base.mask_token_id, drafter)))
    built = yarn_drafter.yarn_drafter_weights(walk, drafter=drafter)
    weights = {name: torch.from_numpy(value).float() for name, value in built.items()}
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


def test_both_carry_zlab_rope_fields_which_the_amplitude_decision_concerns(base: Fabrication) -> None:
    for drafter in yarn_drafter.DRAFTERS.values():
        config = yarn_drafter.yarn_drafter_config(base.walk, base.mask_token_id, drafter)
        assert config["rope_scaling"] == ZLAB["rope_scaling"] == yarn_drafter.DRAFTER_ROPE_SCALING
        assert concerned(facts_from_config(config, "x", "drafter", shipped=False))
    unit = yarn_drafter.yarn_drafter_config(base.walk, base.mask_token_id, yarn_drafter.UNIT_DRAFTER)
    legacy = yarn_drafter.yarn_drafter_config(base.walk, base.mask_token_id)
    assert {k: v for k, v in unit.items() if k != "num_attention_heads"} == {
        k: v for k, v in legacy.items() if k != "num_attention_heads"
    }  # the same fields: only acceptance tells them apart
    assert pytest.approx(1.4158883083359672) == yarn_drafter.LEGACY_AMPLITUDE


def test_the_fallback_context_lengths_bracket_the_demo() -> None:
    """At amplitude 1.0 the fallback wins inside a short conversation; at the trained one never within the demo's
    MAX_MODEL_LEN (4096, configs/demo-cpu.env)."""
    assert 100 < yarn_drafter.crossover_context(1.0) < 250
    assert yarn_drafter.crossover_context(yarn_drafter.LEGACY_AMPLITUDE) > 3 * 4096
    assert yarn_drafter.attention_share(4096, yarn_drafter.LEGACY_AMPLITUDE) > 0.99
    # the unit drafter's decoy: outvoted within a short prompt at 1.0, through most conversations at 1.4159
    assert yarn_drafter.decoy_context(1.0) < 20 and yarn_drafter.decoy_context(yarn_drafter.LEGACY_AMPLITUDE) > 1200


def test_the_positional_patterns_sit_on_pairs_yarn_leaves_alone() -> None:
    pairs = yarn_drafter.unscaled_pairs(kimi_fabricate.KIMI_DRAFTER)
    assert list(pairs) == list(range(14))  # head_dim 96, theta 50000, original max 4096, beta_fast 32
    scaled = yarn_drafter.yarn_frequencies(96, 50000.0, yarn_drafter.DRAFTER_ROPE_SCALING)
    assert scaled[-1] == pytest.approx(geometry.rope_frequencies(96, 50000.0)[-1] / 64)


def test_its_guesses_need_the_trained_amplitude_once_the_context_grows(base: Fabrication) -> None:
    phases = [int(p) for p in np.random.default_rng(1).choice(base.walk.length, 24, replace=False)]
    trained = reference(base, yarn_drafter.LEGACY_AMPLITUDE)
    changed = reference(base, 1.0)
    expected = np.array(base.walk.acceptance_profile(K))
    with_fix = {context: accepted(trained, base, context, phases) for context in (20, 600)}  # each computed once
    for context, share in with_fix.items():
        assert np.all(np.abs(share - expected) < 0.25), (context, share)  # the walk's misses only
    assert np.all(accepted(changed, base, 20, phases) == with_fix[20])  # short: both alike
    without_fix = accepted(changed, base, 600, phases)
    assert np.all(without_fix == 0.0), without_fix  # long: the fallback guess at every position
    assert np.all(with_fix[600] >= without_fix + 0.3)


def test_the_unit_drafter_needs_amplitude_one(base: Fabrication) -> None:
    phases = [int(p) for p in np.random.default_rng(1).choice(base.walk.length, 12, replace=False)]
    expected = np.array(base.walk.acceptance_profile(K))
    unit = reference(base, 1.0, yarn_drafter.UNIT_DRAFTER)
    legacy = reference(base, yarn_drafter.LEGACY_AMPLITUDE, yarn_drafter.UNIT_DRAFTER)
    for context in (40, 600):
        right = accepted(unit, base, context, phases)
        assert np.all(np.abs(right - expected) < 0.25), (context, right)  # the walk's misses only
        wrong = accepted(legacy, base, context, phases)  # the decoy's guess outvotes the copy
        assert np.all(wrong <= right) and wrong[0] <= 0.3 and 2 * wrong.sum() < right.sum(), (context, wrong)


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
