"""Graph mode with spec decode, and breakable CUDA graphs on ROCm; all after start-up (each rule's `why`)."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator

from kimi_dflash.core.checks import CheckResult, failed, passed, warned
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Fact, Findings, Rule, label
from kimi_dflash.rules.source import SourceLine, VllmSource

COMPILATION_CONFIG = "vllm/config/compilation.py"
MLA_FUSION_PASS = "vllm/compilation/passes/fusion/mla_rope_kvcache_cat_fusion.py"
VLLM_CONFIG = "vllm/config/vllm.py"
BREAKABLE = "VLLM_USE_BREAKABLE_CUDAGRAPH"


def mla_kv_write_fusion(source: VllmSource) -> SourceLine | None:
    """The compile pass that replaces `unified_mla_kv_cache_update` (which calls impl.do_kv_cache_update) with a
    fused rope + cache write op (compilation/passes/fusion/mla_rope_kvcache_cat_fusion.py, 0.22+)."""
    return source.line_of(MLA_FUSION_PASS, "unified_mla_kv_cache_update(")


def capture_sizes(deployment: Deployment) -> list[int] | None:
    """Capture sizes the plan sets (--cudagraph-capture-sizes, --cuda-graph-sizes or --compilation-config JSON)."""
    for option in ("--cudagraph-capture-sizes", "--cuda-graph-sizes"):
        if value := deployment.command.value(option):
            try:
                return [int(v) for v in value.replace(",", " ").split()]
            except ValueError:
                return None
    text = deployment.command.value("--compilation-config")
    try:
        config = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    sizes = config.get("cudagraph_capture_sizes") if isinstance(config, dict) else None
    return [int(v) for v in sizes] if isinstance(sizes, list) else None


def _check_graphs(deployment: Deployment, source: VllmSource) -> Iterator[CheckResult]:
    if deployment.command.flag("--enforce-eager") or deployment.platform == "cpu":
        return
    fusion = mla_kv_write_fusion(source)
    if deployment.kv_scale_mode != "off" and fusion is not None:
        yield failed(
            f"KV_SCALE_MODE={deployment.kv_scale_mode} with graphs (ENFORCE_EAGER=false): the compile pass at "
            f"{fusion} replaces unified_mla_kv_cache_update (which calls impl.do_kv_cache_update, the method the "
            "KV-scale hook wraps) with a fused rope + cache write, so the hook can be bypassed",
            "ENFORCE_EAGER=true for FP8 KV-scale modes, or KV_SCALE_MODE=off",
            "KV-scale hook with graphs",
        )
    k = deployment.num_speculative_tokens
    if k is None:
        return
    step, sizes = 1 + k, capture_sizes(deployment)
    if sizes is None:
        # CompilationConfig.adjust_cudagraph_sizes_for_spec_decode: FULL decode graphs on V1 only (#46324)
        rounding = source.line_of(COMPILATION_CONFIG, "def adjust_cudagraph_sizes_for_spec_decode")
        yield warned(
            f"graphs with spec decode and no capture sizes set: vLLM's defaults are not multiples of 1 + k = "
            f"{step}; it rounds them only for FULL decode graphs on the V1 runner ({rounding}"
            "), and unaligned PIECEWISE sizes can crash mid-decode (vllm #46324)",
            f"set cudagraph_capture_sizes to multiples of {step} (--compilation-config in EXTRA_VLLM_ARGS)",
        )
    elif bad := [s for s in sizes if s % step]:
        yield failed(
            f"capture sizes {bad} are not multiples of 1 + k = {step}: a verify batch padded to them splits "
            "requests across a graph boundary and can crash mid-decode (vllm #46324)",
            f"use multiples of {step} only, e.g. {[step * i for i in (1, 2, 4, 8)]}",
            f"capture sizes not multiples of {step} (#46324)",
        )
    else:
        yield passed(f"capture sizes {sizes} are multiples of 1 + k = {step}")
    downgrade = source.line_of(COMPILATION_CONFIG, "cudagraph_mode = fallback_mode")
    yield warned(
        "spec decode can be silently downgraded to PIECEWISE graphs when an attention backend does not support "
        f"FULL for a uniform verify batch (vllm #49547{'; ' + str(downgrade) if downgrade else ''}): nothing "
        "fails, decode is slower",
        "check the server log's resolved cudagraph_mode (FULL_AND_PIECEWISE or FULL_DECODE_ONLY expected)",
    )


def breakable_architectures(source: VllmSource) -> set[str]:
    """Architectures vLLM turns breakable graphs on for while VLLM_USE_BREAKABLE_CUDAGRAPH is unset (0.26+, all
    platforms): DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES (0.29+), or the strings of the tests of the variable."""
    tree = source.tree(VLLM_CONFIG)
    ifs = (n for n in ast.walk(tree) if isinstance(n, ast.If)) if tree else ()
    tests = [n.test for n in ifs if BREAKABLE in ast.unparse(n.test)]
    strings = {n.value for t in tests for n in ast.walk(t) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return strings | set(source.assigned_strings(VLLM_CONFIG, "DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES"))


def _check_breakable(deployment: Deployment, source: VllmSource) -> Findings:
    declared = source.line_of("vllm/envs.py", f'"{BREAKABLE}"')
    if deployment.platform != "rocm" or deployment.command.flag("--enforce-eager") or declared is None:
        return []
    value = deployment.env.get(BREAKABLE, "").strip()
    auto = sorted(set(deployment.target.architectures if deployment.target else ()) & breakable_architectures(source))
    if value != "1" and (value or not auto):
        return passed(f"breakable CUDA graphs stay off ({BREAKABLE} {value or 'unset'}; {declared})")
    why = f"{BREAKABLE}=1" if value else f"{label(source)} turns them on for {', '.join(auto)} ({VLLM_CONFIG})"
    return warned(
        f"breakable CUDA graphs on ROCm ({why}): vLLM then turns its torch.compile pipeline off, they regress "
        "performance on ROCm (vLLM 0.30+'s own reason for keeping them off there), and the Kimi-K3 recipe "
        f"requires {BREAKABLE}=0 on ROCm",
        f"set {BREAKABLE}=0 in serve's environment",
    )


RULES = (
    Rule(
        "graphs with spec decode",
        "graph mode: capture sizes aligned to 1 + k, no silent PIECEWISE, the KV-scale hook not compiled away",
        "Unaligned PIECEWISE capture sizes can crash; spec decode can silently fall to PIECEWISE; the MLA rope + "
        "KV-cache fusion pass replaces the write the KV-scale hook wraps.",
        "CompilationConfig.adjust_cudagraph_sizes_for_spec_decode and the cudagraph_mode fallback "
        "(config/compilation.py); compilation/passes/fusion/mla_rope_kvcache_cat_fusion.py",
        "aligned cudagraph_capture_sizes; ENFORCE_EAGER=true with KV_SCALE_MODE != off",
        _check_graphs,
        silent_at_startup="capture sizes are used at graph capture and decode, after start-up; the PIECEWISE "
        "downgrade is logged, not raised",
        upstream=("vllm #46324", "vllm #49547"),
        facts=(Fact("MLA KV-write fusion pass (bypasses the KV-scale hook)", lambda s, _: mla_kv_write_fusion(s)),),
    ),
    Rule(
        "breakable graphs on rocm",
        "breakable CUDA graphs stay off on ROCm when graphs are on",
        "The Kimi-K3 recipe requires VLLM_USE_BREAKABLE_CUDAGRAPH=0 on ROCm; vLLM 0.30+ keeps them off there by "
        "default because they regress performance, and switches torch.compile off when they are on. Neither the "
        "plan nor the image sets it, and no release turns it on for Kimi K2.6's architecture: only an inherited "
        "environment can.",
        "VLLM_USE_BREAKABLE_CUDAGRAPH (envs.py), DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES and "
        "VllmConfig._maybe_enable_breakable_cudagraph (config/vllm.py)",
        "VLLM_USE_BREAKABLE_CUDAGRAPH=0",
        _check_breakable,
        silent_at_startup="vLLM starts with breakable graphs and logs it; decode is slower",
        upstream=("vllm-project/recipes Kimi-K3 (AMD)", "vllm-project/recipes #539"),
    ),
)
