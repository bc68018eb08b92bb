"""Turn statuses into new file contents, for `apply` and `revert` (pure functions, no I/O).

Every resulting file is compiled before anything is written, so a patch can never leave an
invalid module behind.
"""

from __future__ import annotations

from collections.abc import Mapping

from kimi_dflash.patcher.markers import add_marker, remove_marker, sha256_text
from kimi_dflash.patcher.model import (
    PatcherError,
    PatchState,
    Status,
    UnrecognisedSource,
)


def plan_apply(states: tuple[PatchState, ...], texts: Mapping[str, str | None]) -> dict[str, str]:
    """New text per file for every PENDING patch (registry order). Only changed files returned."""
    current: dict[str, str] = {}
    for state in states:
        if state.status is not Status.PENDING:
            continue
        patch = state.patch
        for path in patch.files:
            before = current.get(path, texts[path])
            assert before is not None  # PENDING guarantees every file exists
            text = before
            for edit in (e for e in patch.edits if e.path == path):
                if text.count(edit.old) != 1:
                    raise PatcherError(
                        f"internal error: patch {patch.id} anchor {edit.first_line()} is no longer "
                        f"unique in vllm/{path} after earlier edits; nothing was written"
                    )
                text = text.replace(edit.old, edit.new, 1)
            current[path] = add_marker(before, text, patch.id)
    return {path: text for path, text in current.items() if text != texts[path]}


def plan_revert(states: tuple[PatchState, ...], texts: Mapping[str, str | None]) -> dict[str, str]:
    """Original text per file for every APPLIED patch, verified against the recorded hash."""
    current: dict[str, str] = {}
    for state in reversed(states):
        if state.status is not Status.APPLIED:
            continue
        patch = state.patch
        for path in patch.files:
            text = current.get(path, texts[path])
            assert text is not None
            text, marker = remove_marker(text, patch.id)
            for edit in reversed([e for e in patch.edits if e.path == path]):
                if text.count(edit.new) != 1:
                    raise UnrecognisedSource(
                        f"cannot revert {patch.id}: vllm/{path} no longer holds its patched block "
                        f"exactly once; nothing was written. Reinstall vLLM to get a clean tree."
                    )
                text = text.replace(edit.new, edit.old, 1)
            if sha256_text(text) != marker.sha256_before:
                raise UnrecognisedSource(
                    f"cannot revert {patch.id}: vllm/{path} was changed after it was patched "
                    f"(sha256 of the restored text does not match the marker); nothing was written. "
                    f"Reinstall vLLM to get a clean tree."
                )
            current[path] = text
    return {path: text for path, text in current.items() if text != texts[path]}


def check_compiles(new_texts: Mapping[str, str]) -> None:
    """Raise PatcherError if any new file would not compile (nothing has been written yet)."""
    for path, text in new_texts.items():
        try:
            compile(text, f"vllm/{path}", "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise PatcherError(
                f"internal error: the patched vllm/{path} would not compile ({exc.msg}, line "
                f"{exc.lineno}); nothing was written"
            ) from exc
