"""Attention-backend facts several rules share. Each returns None when its definition is not where any release
0.20-0.33 keeps it: the rules then say "cannot verify"."""

from __future__ import annotations

import ast

from kimi_dflash.rules.source import VllmSource

BACKEND_ENUM = "AttentionBackendEnum"
PLATFORM_MODULES = {"rocm": "vllm/platforms/rocm.py", "cuda": "vllm/platforms/cuda.py", "cpu": "vllm/platforms/cpu.py"}


def backend_enum(source: VllmSource) -> tuple[str, dict[str, str | None]] | None:
    """The module that defines AttentionBackendEnum, and its members' "package.module.Class" values."""
    for under in ("vllm/v1/attention/", "vllm/attention/", "vllm/"):
        module = source.find_module(BACKEND_ENUM, under)
        if module is not None:
            members = source.enum_values(module, BACKEND_ENUM)
            return None if members is None else (module, members)
    return None


def backend_class(source: VllmSource, member: str) -> tuple[str, str] | None:
    found = backend_enum(source)
    dotted, _, cls = ((found[1] if found else {}).get(member) or "").rpartition(".")
    relpath = source.module_path(dotted) if dotted else None
    return None if relpath is None else (relpath, cls)


def backend_kv_dtypes(source: VllmSource, member: str) -> tuple[str, ...] | None:
    found = backend_class(source, member)
    return None if found is None else source.class_list(*found, "supported_kv_cache_dtypes")


def backend_supports_non_causal(source: VllmSource, member: str) -> bool | None:
    """Whether the backend class declares `supports_non_causal()` (DFlash drafts a block bidirectionally)."""
    found = backend_class(source, member)
    return None if found is None else source.function(found[0], f"{found[1]}.supports_non_causal") is not None


def backend_metadata_has_causal(source: VllmSource, member: str) -> bool | None:
    """Whether the backend module's metadata dataclass has a `causal` field (the pre-0.23 DFlash check reads it)."""
    found = backend_class(source, member)
    tree = None if found is None else source.tree(found[0])
    if found is None or tree is None:
        return None
    metadata = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Metadata")]
    return any("causal" in (source.class_fields(found[0], name) or ()) for name in metadata)


def mla_backends(source: VllmSource, platform: str, aiter_mla: bool) -> tuple[str, ...] | None:
    """The members inside the selector's `if use_mla:`, in order, branches taken as the hardware takes them: ROCm's
    `is_mla_enabled()` by `aiter_mla`, CUDA's `device_capability.major == 10` as false (H200: sm_90)."""
    tree = source.tree(PLATFORM_MODULES.get(platform, ""))
    branches = (n for n in ast.walk(tree) if isinstance(n, ast.If) and _mentions(n.test, "use_mla")) if tree else ()
    branch = next((b for b in branches if _backend_refs(b.body, True)), None)
    return None if branch is None else tuple(_backend_refs(branch.body, aiter_mla))


def default_drafter_backend(source: VllmSource, platform: str) -> str | None:
    """The first non-MLA backend of `_get_backend_priorities` (ROCm: ROCM_ATTN first) that declares non-causal
    support: the selector skips the others for a DFlash drafter."""
    function = source.function(PLATFORM_MODULES.get(platform, ""), "_get_backend_priorities")
    rest: list[ast.stmt] = []
    seen_mla = False
    for stmt in function.body if function is not None else ():
        if isinstance(stmt, ast.If) and _mentions(stmt.test, "use_mla"):
            seen_mla = True
            rest.extend(stmt.orelse)
        elif seen_mla:
            rest.append(stmt)
    return next((m for m in _backend_refs(rest, aiter_mla=False) if backend_supports_non_causal(source, m)), None)


def _backend_refs(statements: list[ast.stmt], aiter_mla: bool) -> list[str]:
    """In order; the hardware's side of the branches mla_backends knows, both sides of any other."""
    refs: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "is_mla_enabled" in test:
                chosen = node.body if aiter_mla else node.orelse
            else:
                chosen = node.orelse if "device_capability" in test else [*node.body, *node.orelse]
            for child in [node.test, *chosen]:
                visit(child)
            return
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == BACKEND_ENUM:
            refs.extend([] if node.attr in refs else [node.attr])
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in statements:
        visit(stmt)
    return refs


def _mentions(expr: ast.expr, name: str) -> bool:
    return any(getattr(n, "id", None) == name or getattr(n, "attr", None) == name for n in ast.walk(expr))
