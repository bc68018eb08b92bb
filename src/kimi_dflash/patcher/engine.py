"""The patcher's public API: status table, apply, revert, diff for one vLLM source tree.

table = status_table()                  # the installed vllm, or status_table("/path/to/vllm")
print(table.to_text()); table.exit_code # 0 nothing needed, 1 pending, 2 unrecognised
apply_pending()                         # all pending patches, all-or-nothing
revert_applied()                        # byte-identical originals
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.patcher.model import (
    Patch,
    PatcherError,
    PatchState,
    Status,
    UnrecognisedSource,
)
from kimi_dflash.patcher.plan import check_compiles, plan_apply, plan_revert
from kimi_dflash.patcher.registry import PATCHES
from kimi_dflash.patcher.status import evaluate_all
from kimi_dflash.patcher.txn import patcher_lock, write_all_or_nothing

EXIT_OK, EXIT_PENDING, EXIT_UNRECOGNISED = 0, 1, 2


def resolve_vllm_root(vllm_root: str | Path | None = None) -> Path:
    """The vllm package directory: given explicitly (the package dir or its parent), or found
    without importing vLLM (importing it is slow and may need a GPU runtime)."""
    if vllm_root is None:
        try:
            spec = importlib.util.find_spec("vllm")
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise UnrecognisedSource(
                "vLLM is not importable in this Python environment, so there is no default tree to "
                "patch. Install vLLM here, or pass --vllm-root DIR (the `vllm` package directory)."
            )
        return Path(next(iter(spec.submodule_search_locations))).resolve()
    root = Path(vllm_root).expanduser()
    if (root / "vllm" / "__init__.py").is_file() and not (root / "__init__.py").is_file():
        root = root / "vllm"
    if not (root / "__init__.py").is_file() or not (root / "v1").is_dir():
        raise UnrecognisedSource(
            f"{root} is not a vLLM source tree (expected the `vllm` package directory, holding "
            f"__init__.py and v1/). Pass --vllm-root pointing at it."
        )
    return root.resolve()


def read_vllm_version(root: Path) -> str | None:
    """Informational only (shown in the table); no decision is ever made from it."""
    for name in ("_version.py", "version.py"):
        path = root / name
        if path.is_file():
            match = re.search(
                r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""",
                path.read_text(),
            )
            if match:
                return match.group(1)
    return None


def read_texts(root: Path, patches: Iterable[Patch] = PATCHES) -> dict[str, str | None]:
    paths: dict[str, None] = {}
    for patch in patches:
        for edit in patch.edits:
            paths.setdefault(edit.path, None)
        for probe in (*patch.retired_when, *patch.runtime_hooks):
            paths.setdefault(probe.path, None)
    texts: dict[str, str | None] = {}
    for rel in paths:
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
        if Status.UNRECOGNISED in statuses:
            return EXIT_UNRECOGNISED
        if Status.PENDING in statuses:
            return EXIT_PENDING
        return EXIT_OK

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
        lines = [
            f"vLLM tree: {self.root}" + (f" (version {self.version})" if self.version else ""),
        ]
        for row in rows:
            lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
        for state in self.states:
            for problem in state.problems:
                lines.append(f"  {state.patch.id}: {problem}")
        lines.append(f"=> {self.summary()}")
        return "\n".join(lines)


def _select(only: Iterable[str] | None, registry: tuple[Patch, ...]) -> tuple[Patch, ...]:
    if not only:
        return registry
    known = {p.id for p in registry}
    unknown = sorted(set(only) - known)
    if unknown:
        raise PatcherError(f"unknown patch id(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return tuple(p for p in registry if p.id in set(only))


def status_table(
    vllm_root: str | Path | None = None,
    only: Iterable[str] | None = None,
    registry: tuple[Patch, ...] = PATCHES,
) -> StatusTable:
    """Status of every registry patch (or the `only` ids) in a vLLM tree. Reads, never writes."""
    root = resolve_vllm_root(vllm_root)
    patches = _select(only, registry)
    states = evaluate_all(patches, read_texts(root, patches))
    return StatusTable(root, read_vllm_version(root), states)


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


def _refuse_unrecognised(table: StatusTable, action: str) -> None:
    bad = [s for s in table.states if s.status is Status.UNRECOGNISED]
    if bad:
        lines = [f"refusing to {action}: unrecognised source in {table.root}; nothing was written"]
        for state in bad:
            lines.append(f"  {state.patch.id}: {state.detail}")
            lines += [f"    - {problem}" for problem in state.problems]
        raise UnrecognisedSource("\n".join(lines))


def _change(
    vllm_root: str | Path | None,
    only: Iterable[str] | None,
    action: str,
    registry: tuple[Patch, ...],
) -> ChangeResult:
    root = resolve_vllm_root(vllm_root)
    patches = _select(only, registry)
    with patcher_lock(root):
        texts = read_texts(root, patches)
        before = StatusTable(root, read_vllm_version(root), evaluate_all(patches, texts))
        _refuse_unrecognised(before, action)
        planner = plan_apply if action == "apply" else plan_revert
        new_texts = planner(before.states, texts)
        check_compiles(new_texts)
        changes = {path: (texts[path] or "", text) for path, text in new_texts.items()}
        if changes:
            write_all_or_nothing(root, changes)
        after = StatusTable(root, before.version, evaluate_all(patches, read_texts(root, patches)))
        wanted = {Status.APPLIED, Status.RETIRED} if action == "apply" else {Status.PENDING, Status.RETIRED}
        wrong = [s for s in after.states if s.status not in wanted]
        if wrong:
            # Cannot happen unless a patch is inconsistent with its own probes: undo, then report.
            undo = {path: (text, texts[path] or "") for path, text in new_texts.items()}
            if undo:
                write_all_or_nothing(root, undo)
            ids = ", ".join(f"{s.patch.id}={s.status.value}" for s in wrong)
            raise PatcherError(f"internal error: after {action}, {ids}; the tree was restored")
    return ChangeResult(before, after, tuple(sorted(changes)))


def apply_pending(
    vllm_root: str | Path | None = None,
    only: Iterable[str] | None = None,
    registry: tuple[Patch, ...] = PATCHES,
) -> ChangeResult:
    """Apply every pending patch (or the `only` ids) in one all-or-nothing step. Idempotent."""
    return _change(vllm_root, only, "apply", registry)


def revert_applied(
    vllm_root: str | Path | None = None,
    only: Iterable[str] | None = None,
    registry: tuple[Patch, ...] = PATCHES,
) -> ChangeResult:
    """Restore the byte-identical original of every file a patch (or the `only` ids) touched."""
    return _change(vllm_root, only, "revert", registry)


def diff(
    vllm_root: str | Path | None = None,
    only: Iterable[str] | None = None,
    registry: tuple[Patch, ...] = PATCHES,
) -> str:
    """Unified diff: what `apply` would change (pending) and what was changed (applied)."""
    root = resolve_vllm_root(vllm_root)
    patches = _select(only, registry)
    texts = read_texts(root, patches)
    states = evaluate_all(patches, texts)
    chunks = []
    for label, planner, flip in (
        ("pending", plan_apply, False),
        ("applied", plan_revert, True),
    ):
        try:
            planned = planner(states, texts)
        except UnrecognisedSource as exc:
            chunks.append(f"# {label}: cannot reconstruct: {exc}\n")
            continue
        for path, text in sorted(planned.items()):
            old, new = (text, texts[path] or "") if flip else (texts[path] or "", text)
            chunks.append(f"# {label}\n")
            chunks.extend(
                difflib.unified_diff(
                    old.splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    fromfile=f"a/vllm/{path}",
                    tofile=f"b/vllm/{path}",
                )
            )
    return "".join(chunks)


def to_json_text(payload: dict[str, object]) -> str:
    return json.dumps(payload, indent=2, sort_keys=False)
