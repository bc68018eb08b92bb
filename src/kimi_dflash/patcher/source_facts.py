"""Semantic facts read from vLLM's source: which attention backends a platform offers, what KV dtypes they
take, whether a backend runs non-causal blocks, how WNA16 MoE experts pick their kernel, which parser and
model names are registered.

Each function names the vLLM definition it reads in its docstring and returns None when that definition is not
where any release 0.20-0.33 keeps it (a reshaped vLLM): the compatibility check then says "cannot verify" rather
than guessing. No vLLM import, no version strings.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kimi_dflash.patcher.vllm_source import VllmSource

BACKEND_ENUM = "AttentionBackendEnum"
_BACKEND_ENUM_DIRS = ("vllm/v1/attention/backends/", "vllm/v1/attention/", "vllm/attention/")
PLATFORM_MODULES = {"rocm": "vllm/platforms/rocm.py", "cuda": "vllm/platforms/cuda.py", "cpu": "vllm/platforms/cpu.py"}
ENVS = "vllm/envs.py"

WNA16_ORACLE = "vllm/model_executor/layers/fused_moe/oracle/int_wna16.py"
CT_MOE_DIR = "vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/"
# The class vLLM builds for compressed-tensors WNA16 experts, per platform, in order of preference: CUDA uses the
# Marlin method where a release has one (it is picked whenever Marlin supports the layer, true for Kimi's
# shapes); ROCm always falls through to the generic method (Marlin is CUDA-only, and the RDNA3 / gfx950-FlyDSL
# special cases do not apply to MI300X), as does the CPU build.
WNA16_METHODS = {
    "rocm": ("CompressedTensorsWNA16MoEMethod",),
    "cpu": ("CompressedTensorsWNA16MoEMethod",),
    "cuda": ("CompressedTensorsWNA16MarlinMoEMethod", "CompressedTensorsWNA16MoEMethod"),
}

REGISTRIES = {
    "tool_parser": ("vllm/", "_TOOL_PARSERS_TO_REGISTER"),
    "reasoning_parser": ("vllm/", "_REASONING_PARSERS_TO_REGISTER"),
}
MODEL_REGISTRY = "vllm/model_executor/models/registry.py"


# --- attention backends --------------------------------------------------------------------------------


def backend_paths(source: VllmSource) -> dict[str, str] | None:
    """AttentionBackendEnum member -> "package.module.Class" (the enum's string values)."""
    for under in _BACKEND_ENUM_DIRS:
        module = source.find_module(BACKEND_ENUM, under)
        if module is not None:
            return source.enum_values(module, BACKEND_ENUM)
    return None


def _backend_class(source: VllmSource, member: str) -> tuple[str, str] | None:
    path = (backend_paths(source) or {}).get(member)
    if not path:
        return None
    module, _, cls = path.rpartition(".")
    relpath = source.module_path(module)
    return None if relpath is None else (relpath, cls)


def backend_kv_dtypes(source: VllmSource, member: str) -> tuple[str, ...] | None:
    """The backend class's `supported_kv_cache_dtypes` (inherited if it does not set its own)."""
    found = _backend_class(source, member)
    return None if found is None else source.class_list(*found, "supported_kv_cache_dtypes")


def backend_supports_non_causal(source: VllmSource, member: str) -> bool | None:
    """Whether the backend class declares `supports_non_causal()` (DFlash drafts a block bidirectionally)."""
    found = _backend_class(source, member)
    if found is None:
        return None
    return source.function(found[0], f"{found[1]}.supports_non_causal") is not None


def backend_metadata_has_causal(source: VllmSource, member: str) -> bool | None:
    """Whether the backend module's metadata dataclass has a `causal` field (the pre-0.23 DFlash check reads it)."""
    found = _backend_class(source, member)
    tree = None if found is None else source.tree(found[0])
    if found is None or tree is None:
        return None
    metadata = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Metadata")]
    return any("causal" in (source.class_fields(found[0], name) or ()) for name in metadata)


def mla_backends(source: VllmSource, platform: str, aiter_mla: bool) -> tuple[str, ...] | None:
    """MLA backends the platform's selector may pick, in its order: the members named inside the selector's
    `if use_mla:` branch (vllm/platforms/<platform>.py). Branches inside it are followed the way the target
    hardware takes them: ROCm's `rocm_aiter_ops.is_mla_enabled()` by `aiter_mla` (VLLM_ROCM_USE_AITER=1 and
    VLLM_ROCM_USE_AITER_MLA not off), CUDA's `device_capability.major == 10` as false (H200 is sm_90)."""
    branch = _use_mla_branch(source, platform)
    return None if branch is None else tuple(_backend_refs(branch.body, aiter_mla))


def non_mla_backends(source: VllmSource, platform: str) -> tuple[str, ...] | None:
    """Non-MLA backends in the selector's order: the members named in the `else` of, or after, the
    `if use_mla:` branch of the platform's `_get_backend_priorities` (ROCm: ROCM_ATTN first; CUDA sm_90:
    FLASH_ATTN first)."""
    module = PLATFORM_MODULES.get(platform)
    function = None if module is None else source.function(module, "_get_backend_priorities")
    if function is None:
        return None
    rest: list[ast.stmt] = []
    seen_mla = False
    for stmt in function.body:
        if isinstance(stmt, ast.If) and _mentions(stmt.test, "use_mla"):
            seen_mla = True
            rest.extend(stmt.orelse)
        elif seen_mla:
            rest.append(stmt)
    return tuple(_backend_refs(rest, aiter_mla=False)) if seen_mla else None


def default_drafter_backend(source: VllmSource, platform: str) -> str | None:
    """The backend a DFlash drafter gets when none is configured: the first non-MLA backend of the platform's
    priority list that declares non-causal support (the selector skips the others for a DFlash drafter)."""
    for member in non_mla_backends(source, platform) or ():
        if backend_supports_non_causal(source, member):
            return member
    return None


def _use_mla_branch(source: VllmSource, platform: str) -> ast.If | None:
    module = PLATFORM_MODULES.get(platform)
    tree = None if module is None else source.tree(module)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _mentions(node.test, "use_mla") and _backend_refs(node.body, True):
            return node
    return None


def _backend_refs(statements: list[ast.stmt], aiter_mla: bool) -> list[str]:
    """AttentionBackendEnum members named in `statements`, in order, following the hardware's side of the
    branches this module knows (see mla_backends) and both sides of any other branch."""
    refs: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "is_mla_enabled" in test:
                chosen = node.body if aiter_mla else node.orelse
            elif "device_capability" in test:
                chosen = node.orelse
            else:
                chosen = [*node.body, *node.orelse]
            visit(node.test)
            for stmt in chosen:
                visit(stmt)
            return
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == BACKEND_ENUM
            and node.attr not in refs
        ):
            refs.append(node.attr)
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in statements:
        visit(stmt)
    return refs


def _mentions(expr: ast.expr, name: str) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name)
        for n in ast.walk(expr)
    )


# --- WNA16 MoE experts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wna16BackendChoice:
    """How a vLLM picks the kernel for compressed-tensors WNA16 experts on one platform."""

    method: str  # the MoE method class vLLM builds for these experts
    method_module: str
    honours_moe_backend: bool  # the method passes --moe-backend to select_wna16_moe_backend, which maps it
    accepted: tuple[str, ...]  # --moe-backend values map_wna16_backend accepts (when honoured)

    def where(self) -> str:
        return f"{self.method} ({self.method_module})"


def wna16_backend_choice(source: VllmSource, platform: str) -> Wna16BackendChoice | None:
    """Reads the method class (compressed_tensors_moe/), whether it calls `select_wna16_moe_backend`, whether that
    oracle maps `moe_backend` through `map_wna16_backend`, and that function's `mapping` keys."""
    for method in WNA16_METHODS.get(platform, ()):
        module = source.find_module(method, CT_MOE_DIR)
        if module is None:
            continue
        calls_oracle = bool(source.calls(module, method, "select_wna16_moe_backend"))
        oracle = source.function(WNA16_ORACLE, "select_wna16_moe_backend")
        maps = oracle is not None and any(
            isinstance(n, ast.Call) and ast.unparse(n.func) == "map_wna16_backend" for n in ast.walk(oracle)
        )
        accepted = source.local_dict_keys(WNA16_ORACLE, "map_wna16_backend", "mapping") or ()
        return Wna16BackendChoice(method, module, calls_oracle and maps and bool(accepted), tuple(accepted))
    return None


# --- registries and environment ------------------------------------------------------------------------


def registered(source: VllmSource, registry: str) -> tuple[str, ...] | None:
    """Names in a lazy registry dict: tool parsers (`_TOOL_PARSERS_TO_REGISTER`), reasoning parsers
    (`_REASONING_PARSERS_TO_REGISTER`)."""
    under, name = REGISTRIES[registry]
    module = source.find_module(name, under)
    return None if module is None else source.dict_keys(module, name)


def model_architectures(source: VllmSource) -> tuple[str, ...] | None:
    """Every architecture name in vllm/model_executor/models/registry.py's `_*_MODELS` dicts."""
    tree = source.tree(MODEL_REGISTRY)
    if tree is None:
        return None
    names: list[str] = []
    for stmt in tree.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id.endswith("_MODELS") and isinstance(stmt.value, ast.Dict):
            names.extend(k.value for k in stmt.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return tuple(dict.fromkeys(names))


def env_choices(source: VllmSource, variable: str) -> tuple[str, ...] | None:
    """The values vLLM accepts for a variable declared with `env_with_choices(NAME, default, [choices])` in
    vllm/envs.py; None when the variable takes free values (or is not declared that way)."""
    tree = source.tree(ENVS)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("env_with_choices")):
            continue
        args = node.args
        if (
            args
            and isinstance(args[0], ast.Constant)
            and args[0].value == variable
            and len(args) >= 3
            and isinstance(args[2], (ast.List, ast.Tuple))
        ):
            return tuple(e.value for e in args[2].elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return None


MLA_LAYER = "vllm/model_executor/layers/attention/mla_attention.py"


def kv_write_hook_points(source: VllmSource) -> bool | None:
    """Whether `MLAAttention` (mla_attention.py) exists and writes latents through `impl.do_kv_cache_update`,
    the method the project's KV-scale hook wraps."""
    if not source.has(MLA_LAYER):
        return None
    return bool(source.calls(MLA_LAYER, "MLAAttention", "do_kv_cache_update"))
