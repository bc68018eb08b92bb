"""The patcher's public API for one vLLM source tree: status_table() (exit_code 0 nothing needed, 1 pending, 2
unrecognised), apply_pending() (all-or-nothing), revert_applied() (byte-identical originals), diff()."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.patcher import floor
from kimi_dflash.patcher.model import Patch, PatcherError, PatchState, Status, UnrecognisedSource
from kimi_dflash.patcher.registry import PATCHES, source_paths
from kimi_dflash.patcher.status import check_compiles, evaluate_all, plan_apply, plan_revert
from kimi_dflash.patcher.txn import patcher_lock, write_all_or_nothing

EXIT_OK, EXIT_PENDING, EXIT_UNRECOGNISED = 0, 1, 2
Root = str | Path | None  # the vllm package directory, or its parent (None: the installed vLLM)
Ids = Iterable[str] | None  # only these patches (None: all)
Registry = tuple[Patch, ...]
_EXITS = ((Status.UNRECOGNISED, EXIT_UNRECOGNISED), (Status.PENDING, EXIT_PENDING))  # the worst status decides


def resolve_vllm_root(vllm_root: Root = None) -> Path:
    """The vllm package directory: given explicitly (the package dir or its parent), or the one this process runs
    or would import, found without importing vLLM (importing it is slow and may need a GPU runtime)."""
    if (root := floor.package_dir(None if vllm_root is None else Path(vllm_root))) is None:
        raise UnrecognisedSource(
            "vLLM is not importable in this Python environment, so there is no default tree to "
            "patch. Install vLLM here, or pass --vllm-root DIR (the `vllm` package directory)."
        )
    if not (root / "__init__.py").is_file() or not (root / "v1").is_dir():
        raise UnrecognisedSource(
            f"{root} is not a vLLM source tree (expected the `vllm` package directory, holding "
            f"__init__.py and v1/). Pass --vllm-root pointing at it."
        )
    return root.resolve()


def read_texts(root: Path, patches: Iterable[Patch] = PATCHES) -> dict[str, str | None]:
    texts: dict[str, str | None] = {}
    for rel in source_paths(patches):
        path = root / rel
        try:
            texts[rel] = path.read_bytes().decode("utf-8") if path.is_file() else None
        except UnicodeDecodeError:
            texts[rel] = None  # not a source we recognise; the status says so
    return texts


@dataclass(frozen=True)
class StatusTable:
    root: Path
    version: str | None
    states: tuple[PatchState, ...]

    @property
    def exit_code(self) -> int:
        statuses = {state.status for state in self.states}
        return next((code for status, code in _EXITS if status in statuses), EXIT_OK)

    def by_id(self) -> dict[str, PatchState]:
        return {state.patch.id: state for state in self.states}

    def summary(self) -> str:
        return {
            EXIT_OK: "nothing to do",
            EXIT_PENDING: "patches pending: run `apply`",
            EXIT_UNRECOGNISED: "unrecognised source: refusing to patch",
        }[self.exit_code]

    def to_json(self) -> dict[str, object]:
        return {
            "vllm_root": str(self.root),
            "vllm_version": self.version,
            "exit_code": self.exit_code,
            "summary": self.summary(),
            "patches": [state.to_json() for state in self.states],
        }

    def to_text(self) -> str:
        rows = [("patch", "status", "delivery", "detail")]
        rows += [(s.patch.id, s.status.value, s.patch.delivery, s.detail) for s in self.states]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = [f"vLLM tree: {self.root}" + (f" (version {self.version})" if self.version else "")]
        lines += ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3] for row in rows]
        lines += [f"  {state.patch.id}: {problem}" for state in self.states for problem in state.problems]
        return "\n".join([*lines, f"=> {self.summary()}"])


def _select(only: Ids, registry: Registry) -> Registry:
    if not only:
        return registry
    known = {p.id for p in registry}
    if unknown := sorted(set(only) - known):
        raise PatcherError(f"unknown patch id(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return tuple(p for p in registry if p.id in set(only))


def _look(vllm_root: Root, only: Ids, registry: Registry) -> tuple[StatusTable, dict[str, str | None]]:
    """The status table of a tree and the texts it was judged from. Reads, never writes."""
    root = resolve_vllm_root(vllm_root)
    patches = _select(only, registry)
    texts = read_texts(root, patches)
    # The version is informational only (shown in the table); no decision is ever made from it.
    version = floor.version(lambda name: (root / name).read_text() if (root / name).is_file() else None)
    return StatusTable(root, version, evaluate_all(patches, texts)), texts


def status_table(vllm_root: Root = None, only: Ids = None, registry: Registry = PATCHES) -> StatusTable:
    """Status of every registry patch (or the `only` ids) in a vLLM tree. Reads, never writes."""
    return _look(vllm_root, only, registry)[0]


@dataclass(frozen=True)
class ChangeResult:
    before: StatusTable
    after: StatusTable
    changed_files: tuple[str, ...]  # relative to the vllm package

    def to_json(self) -> dict[str, object]:
        return {
            "changed_files": ["vllm/" + path for path in self.changed_files],
            "before": self.before.to_json(),
            "after": self.after.to_json(),
        }


# action -> (planner, the statuses every patch must have afterwards)
_ACTIONS = {
    "apply": (plan_apply, {Status.APPLIED, Status.RETIRED}),
    "revert": (plan_revert, {Status.PENDING, Status.RETIRED}),
}


def _change(action: str, vllm_root: Root, only: Ids, registry: Registry) -> ChangeResult:
    planner, wanted = _ACTIONS[action]
    root = resolve_vllm_root(vllm_root)
    with patcher_lock(root):
        before, texts = _look(root, only, registry)
        if bad := [s for s in before.states if s.status is Status.UNRECOGNISED]:
            lines = [f"refusing to {action}: unrecognised source in {root}; nothing was written"]
            for state in bad:
                lines += [f"  {state.patch.id}: {state.detail}", *(f"    - {problem}" for problem in state.problems)]
            raise UnrecognisedSource("\n".join(lines))
        new_texts = planner(before.states, texts)
        check_compiles(new_texts)
        if new_texts:
            write_all_or_nothing(root, {path: (texts[path] or "", text) for path, text in new_texts.items()})
        after = status_table(root, only, registry)
        if wrong := [s for s in after.states if s.status not in wanted]:
            # Cannot happen unless a patch is inconsistent with its own probes: undo, then report.
            if new_texts:
                write_all_or_nothing(root, {path: (text, texts[path] or "") for path, text in new_texts.items()})
            ids = ", ".join(f"{s.patch.id}={s.status.value}" for s in wrong)
            raise PatcherError(f"internal error: after {action}, {ids}; the tree was restored")
    return ChangeResult(before, after, tuple(sorted(new_texts)))


def apply_pending(vllm_root: Root = None, only: Ids = None, registry: Registry = PATCHES) -> ChangeResult:
    """All or nothing; idempotent."""
    return _change("apply", vllm_root, only, registry)


def revert_applied(vllm_root: Root = None, only: Ids = None, registry: Registry = PATCHES) -> ChangeResult:
    """Restore the byte-identical original of every file a patch (or the `only` ids) touched."""
    return _change("revert", vllm_root, only, registry)


def diff(vllm_root: Root = None, only: Ids = None, registry: Registry = PATCHES) -> str:
    """Unified diff: what `apply` would change (pending) and what was changed (applied)."""
    table, texts = _look(vllm_root, only, registry)
    chunks = []
    for label, planner, flip in (("pending", plan_apply, False), ("applied", plan_revert, True)):
        try:
            planned = planner(table.states, texts)
        except UnrecognisedSource as exc:
            chunks.append(f"# {label}: cannot reconstruct: {exc}\n")
            continue
        for path, text in sorted(planned.items()):
            old, new = (text, texts[path] or "") if flip else (texts[path] or "", text)
            chunks.append(f"# {label}\n")
            lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
            chunks.extend(difflib.unified_diff(*lines, fromfile=f"a/vllm/{path}", tofile=f"b/vllm/{path}"))
    return "".join(chunks)
