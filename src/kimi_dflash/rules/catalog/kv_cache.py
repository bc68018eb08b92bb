"""The KV cache: the target's KV dtype must be one the platform's MLA backends take, and the FP8 KV-scale hook of
the project's plugin must find MLA's KV write path. vLLM refuses the first at start-up; the hook raises there."""

from __future__ import annotations

from kimi_dflash.core.checks import Remedy, failed, passed, warned
from kimi_dflash.rules import backends
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Findings, Rule, label
from kimi_dflash.rules.source import VllmSource

PLUGIN = "the kimi_dflash vLLM plugin"
MLA_LAYER = "vllm/model_executor/layers/attention/mla_attention.py"


def kv_write_hook_points(source: VllmSource) -> bool | None:
    """Whether MLAAttention writes through impl.do_kv_cache_update, which the KV-scale hook wraps (None: absent)."""
    return bool(source.calls(MLA_LAYER, "MLAAttention", "do_kv_cache_update")) if source.has(MLA_LAYER) else None


def _check_mla_kv_dtype(deployment: Deployment, source: VllmSource) -> Findings:
    dtype, target, platform = deployment.kv_cache_dtype, deployment.target, deployment.platform
    if target is None or not target.mla or dtype == "auto":
        return []
    mla = backends.mla_backends(source, platform, deployment.aiter_mla)
    if not mla:
        return warned(
            f"--kv-cache-dtype {dtype}: cannot verify, the {platform} platform's MLA backend list was not "
            f"found in {label(source)}"
        )
    dtypes = {b: backends.backend_kv_dtypes(source, b) or () for b in mla}
    accepting = [b for b in mla if dtype in dtypes[b]]
    union = sorted({d for listed in dtypes.values() for d in listed})
    fix_key = deployment.blame("--kv-cache-dtype")
    if accepting:
        return passed(f"--kv-cache-dtype {dtype} is supported by MLA backend(s) {', '.join(accepting)}")
    if platform == "cpu":
        return failed(
            f"--kv-cache-dtype {dtype} with an MLA model on the CPU build: the MLA backends ({', '.join(mla)}) "
            f"take only {', '.join(union)}; the CPU selector does not check, so vLLM starts and dies at the "
            "first decode step",
            f"set {fix_key} to auto on CPU",
            f"MLA KV dtype {dtype}",
        )
    return failed(
        f"--kv-cache-dtype {dtype}: none of the {platform} MLA backends ({', '.join(mla)}) supports it "
        '("No valid attention backend found")',
        f"set {fix_key} to one of {', '.join(union)}",
        f"MLA KV dtype {dtype}",
    )


def _check_kv_scale_hook(deployment: Deployment, source: VllmSource) -> Findings:
    mode = deployment.kv_scale_mode
    if mode == "off":
        return []
    points = kv_write_hook_points(source)
    if not points:
        absent = f"needs MLAAttention in {MLA_LAYER}, absent in {label(source)}"
        moved = "MLAAttention no longer writes through impl.do_kv_cache_update, the method the hook wraps"
        detail = f"KV_SCALE_MODE={mode} {absent}" if points is None else f"KV_SCALE_MODE={mode}: {moved}"
        fix = "set KV_SCALE_MODE=off, or use vLLM 0.20-0.33"
        return failed(detail, fix, "KV-scale hook")
    return passed(
        f"KV_SCALE_MODE={mode}: MLAAttention writes latents through impl.do_kv_cache_update, which {PLUGIN} wraps",
        relies=(Remedy("plugin", f"FP8 KV-scale hook ({mode})"),),
    )


RULES = (
    Rule(
        "kv cache dtype",
        "the target KV dtype is one of the platform's MLA backends' dtypes",
        "The selector needs an MLA backend whose supported_kv_cache_dtypes holds the dtype; the CPU selector does "
        "not check and the CPU MLA decode kernel then fails on FP8.",
        "the `if use_mla:` branch of vllm/platforms/<platform>.py and each backend's supported_kv_cache_dtypes",
        "KV_CACHE_DTYPE=auto or a listed dtype",
        _check_mla_kv_dtype,
    ),
    Rule(
        "kv scale hook",
        "the FP8 KV-scale hook finds its write path",
        "KV_SCALE_MODE != off relies on the plugin wrapping MLAAttention's impl.do_kv_cache_update.",
        "MLAAttention in vllm/model_executor/layers/attention/mla_attention.py",
        "KV_SCALE_MODE=off or a vLLM 0.20-0.33",
        _check_kv_scale_hook,
    ),
)
