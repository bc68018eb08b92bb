"""Attention-backend facts read from vLLM's source, shared by several rules: which backends a platform's selector
offers (MLA and not), what KV dtypes they take, whether a backend runs non-causal blocks, which one a DFlash drafter
gets by default.

Each function names the vLLM definition it reads and returns None when that definition is not where any release
0.20-0.33 keeps it (a reshaped vLLM): the rules then say "cannot verify" rather than guess.
"""

from __future__ import annotations

import ast

from kimi_dflash.rules.source import VllmSource

BACKEND_ENUM = "AttentionBackendEnum"
_BACKEND_ENUM_DIRS = ("vllm/v1/attention/backends/", "vllm/v1/attention/", "vllm/attention/")
PLATFORM_MODULES = {"rocm": "vllm/platforms/rocm.py", "cuda": "vllm/platforms/cuda.py", "cpu": "vllm/platforms/cpu.py"}


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
