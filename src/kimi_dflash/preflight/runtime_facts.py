"""Facts read from vLLM's source about what happens after the server has started: the verify length AITER MLA
decodes on its persistent path, whether DFlash drafts correctly over prefix-cache hits, which model runner a plan
gets, whether a compile pass can replace the MLA KV write, how spec decode treats CUDA-graph capture sizes, and
whether the CPU build can run the synthetic acceptance sampler.

Like source_facts: probes of definitions (a class constant, a property's branches, a message string), never
version strings; None where a release does not keep the definition where any release 0.20-0.33 does. Every fact
carries the file and line it was read from, for the check's output and the compatibility doc.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kimi_dflash.patcher.vllm_source import VllmSource

AITER_MLA = "vllm/v1/attention/backends/mla/rocm_aiter_mla.py"
VLLM_CONFIG = "vllm/config/vllm.py"
COMPILATION_CONFIG = "vllm/config/compilation.py"
ENVS = "vllm/envs.py"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
V2_DFLASH_DIR = "vllm/v1/worker/gpu/spec_decode/dflash/"
V1_DFLASH = "vllm/v1/spec_decode/dflash.py"
MLA_FUSION_PASS = "vllm/compilation/passes/fusion/mla_rope_kvcache_cat_fusion.py"
CPU_TRITON_UTILS = "vllm/utils/cpu_triton_utils.py"
SYNTHETIC_CPU_MESSAGE = "Synthetic acceptance not supported with CPU sampling"
# What PR #47926 (fix for #47930) introduces: the DFlash input preparation learns how many of a request's tokens
# were restored (prefix cache, KV connector, preemption) rather than computed, and masks them out of the draft
# context. Any such count in the DFlash code paths marks the fix; 0.20-0.33 have none.
_PREFIX_FIX_RE = re.compile(r"\b\w*(?:restored|num_cached|cache_hit|prefix_hit)\w*\b", re.IGNORECASE)


@dataclass(frozen=True)
class SourceLine:
    path: str
    line: int | None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


# --- AITER MLA verify length ---------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyCap:
    """How AITER MLA's decode treats a verify step on a rank whose heads are padded to `min_heads`."""

    cap: int | None  # _ASM_PADDED_MAX_PS_QLEN: the longest query a padded rank decodes on the persistent path
    min_heads: int | None  # _AITER_MIN_MLA_HEADS: fewer heads per rank than this are padded
    fp8_keeps_schedule: bool  # the routing keeps the persistent schedule for a quantised KV cache past the cap
    defined_at: SourceLine  # where the cap is defined (or the module, when absent)
    used_at: SourceLine | None  # the routing predicate that reads it


def aiter_verify_cap(source: VllmSource) -> VerifyCap | None:
    """`AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN` and `_AITER_MIN_MLA_HEADS` in rocm_aiter_mla.py, and the routing
    predicate `use_persistent_metadata` (`... or max_qo_len <= _ASM_PADDED_MAX_PS_QLEN or
    is_quantized_kv_cache(...)`). None when the module is absent; cap None when the module has no such limit
    (0.20-0.27: padded heads go to aiter's decode with no length routing in vLLM)."""
    tree = source.tree(AITER_MLA)
    if tree is None:
        return None
    constants: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "AiterMLAHelper":
            for stmt in node.body:
                name, value = _assigned_constant(stmt)
                if name is not None and isinstance(value, int):
                    constants[name] = (value, stmt.lineno)
    cap = constants.get("_ASM_PADDED_MAX_PS_QLEN")
    heads = constants.get("_AITER_MIN_MLA_HEADS")
    used_at, fp8_keeps = None, False
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            text = ast.unparse(node)
            if "_ASM_PADDED_MAX_PS_QLEN" in text:
                used_at = SourceLine(AITER_MLA, node.lineno)
                fp8_keeps = "is_quantized_kv_cache" in text
                break
    return VerifyCap(
        cap=None if cap is None else cap[0],
        min_heads=None if heads is None else heads[0],
        fp8_keeps_schedule=fp8_keeps,
        defined_at=SourceLine(AITER_MLA, None if cap is None else cap[1]),
        used_at=used_at,
    )


def _assigned_constant(stmt: ast.stmt) -> tuple[str | None, object]:
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(stmt.value, ast.Constant):
        return stmt.target.id, stmt.value.value
    if (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(stmt.value, ast.Constant)
    ):
        return stmt.targets[0].id, stmt.value.value
    return None, None


# --- DFlash + prefix caching ---------------------------------------------------------------------------


def dflash_sources(source: VllmSource) -> tuple[str, ...]:
    """The DFlash drafting code of both model runners: v1/spec_decode/dflash.py (V1) and
    v1/worker/gpu/spec_decode/dflash/ (V2)."""
    paths = [V1_DFLASH] if source.has(V1_DFLASH) else []
    return tuple(paths + list(source.paths(V2_DFLASH_DIR)))


def dflash_prefix_fix(source: VllmSource) -> SourceLine | None:
    """Where the DFlash code counts restored (prefix-cache) tokens, the shape of the #47926 fix; None when no
    DFlash file does (the bug of #47930 stands)."""
    for path in dflash_sources(source):
        text = source.text(path) or ""
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            if _PREFIX_FIX_RE.search(code):
                return SourceLine(path, number)
    return None


def prefix_caching_default(source: VllmSource) -> bool | None:
    """CacheConfig.enable_prefix_caching's default (vllm/config/cache.py): what a command line without either
    flag gets."""
    tree = source.tree("vllm/config/cache.py")
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ClassDef) and node.name == "CacheConfig":
            for stmt in node.body:
                name, value = _assigned_constant(stmt)
                if name == "enable_prefix_caching" and isinstance(value, bool):
                    return value
    return None


def cpu_mla_disables_prefix_caching(source: VllmSource) -> SourceLine | None:
    """vllm/platforms/cpu.py forcing `enable_prefix_caching = False` for MLA models (the CPU demo cannot cache)."""
    text = source.text("vllm/platforms/cpu.py") or ""
    for number, line in enumerate(text.splitlines(), 1):
        if "enable_prefix_caching = False" in line:
            return SourceLine("vllm/platforms/cpu.py", number)
    return None


# --- model runner ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunnerChoice:
    runner: str  # "V1" or "V2"
    why: str
    where: SourceLine


def model_runner(
    source: VllmSource,
    *,
    platform: str,
    method: str | None,
    moe: bool,
    quantized: bool,
    env_value: str | None,
    architectures: tuple[str, ...] = (),
) -> RunnerChoice | None:
    """The runner `VllmConfig.use_v2_model_runner` (vllm/config/vllm.py) gives the plan, followed branch by branch:
    the VLLM_USE_V2_MODEL_RUNNER override; `_is_default_v2_model_runner_model` (0.22-0.28: MoE or quantised
    models stay on V1); `HAS_TRITON` (false on the CPU build); the speculative methods
    `_get_v2_model_runner_unsupported_features` lists. Releases without the property (0.20-0.21) read the
    variable alone, default 0 (V1)."""
    prop = source.function(VLLM_CONFIG, "VllmConfig.use_v2_model_runner")
    override = _truthy(env_value)
    if prop is None:
        if not source.has(ENVS) or "VLLM_USE_V2_MODEL_RUNNER" not in (source.text(ENVS) or ""):
            return None
        runner = "V2" if override else "V1"
        why = "VLLM_USE_V2_MODEL_RUNNER" + (f"={env_value}" if env_value else " unset (default 0)")
        return RunnerChoice(runner, why, SourceLine(ENVS, _line_of(source, ENVS, '"VLLM_USE_V2_MODEL_RUNNER"')))
    where = SourceLine(VLLM_CONFIG, prop.lineno)
    body = ast.unparse(prop)
    if override is not None:
        return RunnerChoice("V2" if override else "V1", f"VLLM_USE_V2_MODEL_RUNNER={env_value}", where)
    if "_is_default_v2_model_runner_model" in body:
        gate = source.function(VLLM_CONFIG, "VllmConfig._is_default_v2_model_runner_model")
        gate_text = "" if gate is None else ast.unparse(gate)
        if moe and "is_moe" in gate_text:
            return RunnerChoice("V1", "MoE models are not default-V2 (_is_default_v2_model_runner_model)", where)
        if quantized and "is_quantized" in gate_text:
            return RunnerChoice("V1", "quantised models are not default-V2 (_is_default_v2_model_runner_model)", where)
        default_v2 = _string_set(source, VLLM_CONFIG, "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES")
        if "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES" in gate_text and not set(architectures) & set(default_v2 or ()):
            return RunnerChoice("V1", "the architecture is not in DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES", where)
    if "HAS_TRITON" in body and platform == "cpu":
        return RunnerChoice("V1", "no Triton on the CPU build (HAS_TRITON false)", where)
    unsupported = source.function(VLLM_CONFIG, "VllmConfig._get_v2_model_runner_unsupported_features")
    if method is not None and unsupported is not None and _method_unsupported(unsupported, method):
        return RunnerChoice("V1", f"V2 does not support speculative method {method!r} in this release", where)
    return RunnerChoice("V2", "Triton present and nothing in the plan is on V2's unsupported list", where)


def _method_unsupported(function: ast.FunctionDef, method: str) -> bool:
    """`speculative_config.method in (...)` / `not in (...)` tests whose body appends to `unsupported`."""
    for node in ast.walk(function):
        if not isinstance(node, ast.If):
            continue
        for test in ast.walk(node.test):
            if not (
                isinstance(test, ast.Compare)
                and ast.unparse(test.left).endswith(".method")
                and len(test.ops) == 1
                and isinstance(test.comparators[0], (ast.Tuple, ast.List, ast.Set))
            ):
                continue
            names = {e.value for e in test.comparators[0].elts if isinstance(e, ast.Constant)}
            appends = any("unsupported.append" in ast.unparse(s) for s in node.body)
            parallel = "parallel_drafting" in ast.unparse(node.test)  # a P-EAGLE feature, not the method
            if not appends or parallel:
                continue
            if isinstance(test.ops[0], ast.In) and method in names:
                return True
            if isinstance(test.ops[0], ast.NotIn) and method not in names:
                return True
    return False


def v2_builds_model_layers(source: VllmSource) -> SourceLine | None:
    """Where the V2 runner (v1/worker/gpu/model_runner.py) builds its model through vLLM's model loader: the same
    model code, hence the same MLAAttention layer the KV-scale hook wraps."""
    text = source.text(V2_RUNNER)
    if text is None:
        return None
    for number, line in enumerate(text.splitlines(), 1):
        if "get_model(" in line or "get_model_loader(" in line:
            return SourceLine(V2_RUNNER, number)
    return None


def _string_set(source: VllmSource, path: str, name: str) -> tuple[str, ...]:
    """The string constants in a module-level `NAME = frozenset({...})` / set / tuple literal."""
    tree = source.tree(path)
    for stmt in tree.body if tree is not None else ():
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return tuple(
                n.value for n in ast.walk(stmt.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            )
    return ()


def _truthy(value: str | None) -> bool | None:
    if value is None or value.strip() == "":
        return None
    return value.strip().lower() in ("1", "true", "yes", "on")


def _line_of(source: VllmSource, path: str, needle: str) -> int | None:
    for number, line in enumerate((source.text(path) or "").splitlines(), 1):
        if needle in line:
            return number
    return None


# --- graphs ----------------------------------------------------------------------------------------------


def mla_kv_write_fusion(source: VllmSource) -> SourceLine | None:
    """The compile pass that replaces `unified_mla_kv_cache_update` (which calls impl.do_kv_cache_update) with a
    fused rope + cache write op (compilation/passes/fusion/mla_rope_kvcache_cat_fusion.py, 0.22+)."""
    line = _line_of(source, MLA_FUSION_PASS, "unified_mla_kv_cache_update(")
    return None if line is None else SourceLine(MLA_FUSION_PASS, line)


def capture_size_rounding(source: VllmSource) -> SourceLine | None:
    """`CompilationConfig.adjust_cudagraph_sizes_for_spec_decode`: vLLM rounds capture sizes to multiples of 1 + k,
    but only for FULL decode graphs on the V1 runner; PIECEWISE capture keeps unaligned sizes (#46324)."""
    function = source.function(COMPILATION_CONFIG, "CompilationConfig.adjust_cudagraph_sizes_for_spec_decode")
    return None if function is None else SourceLine(COMPILATION_CONFIG, function.lineno)


def cudagraph_downgrade(source: VllmSource) -> SourceLine | None:
    """Where the compilation config silently lowers cudagraph_mode to a fallback the attention backends support
    (the PIECEWISE downgrade of #49547)."""
    line = _line_of(source, COMPILATION_CONFIG, "cudagraph_mode = fallback_mode")
    return None if line is None else SourceLine(COMPILATION_CONFIG, line)


# --- synthetic acceptance --------------------------------------------------------------------------------


def synthetic_cpu_refusal(source: VllmSource) -> SourceLine | None:
    """Where the CPU build's sampler raises for synthetic acceptance (vllm/utils/cpu_triton_utils.py)."""
    line = _line_of(source, CPU_TRITON_UTILS, SYNTHETIC_CPU_MESSAGE)
    return None if line is None else SourceLine(CPU_TRITON_UTILS, line)
