"""What a vLLM tree needs for each patch (applied, retired, pending, else unrecognised), and the texts `apply` and
`revert` would write: pure functions over file contents. Each patched file ends with a marker line holding the
sha256 of the file before it, so `revert` can prove it restored the original byte for byte."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from kimi_dflash.patcher.model import Patch, PatcherError, PatchState, Probe, Status, UnrecognisedSource, describe_block

_PREFIX = "# kimi-dflash-patch:"
_MARKER_RE = re.compile(
    r"^# kimi-dflash-patch: id=(?P<id>[a-z0-9-]+) sha256-before=(?P<sha>[0-9a-f]{64})(?P<newline> newline-added)?$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Marker:
    patch_id: str
    sha256_before: str
    newline_added: bool  # the original did not end with a newline; we added one before the marker


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def find_markers(text: str) -> list[Marker]:
    return [Marker(m["id"], m["sha"], m["newline"] is not None) for m in _MARKER_RE.finditer(text)]


def add_marker(text_before: str, patched: str, patch_id: str) -> str:
    """`patched` plus a marker recording `text_before`'s hash (the file before this patch)."""
    newline_added = not patched.endswith("\n")
    line = f"{_PREFIX} id={patch_id} sha256-before={sha256_text(text_before)}"
    if newline_added:
        line += " newline-added"
    return patched + ("\n" if newline_added else "") + line + "\n"


def remove_marker(text: str, patch_id: str) -> tuple[str, Marker]:
    """Drop this patch's marker line; return the text and the marker. KeyError if absent."""
    for match in _MARKER_RE.finditer(text):
        if match["id"] != patch_id:
            continue
        marker = Marker(match["id"], match["sha"], match["newline"] is not None)
        end = match.end() + (1 if text[match.end() : match.end() + 1] == "\n" else 0)
        start = match.start()
        if marker.newline_added and start > 0 and text[start - 1] == "\n":
            start -= 1
        return text[:start] + text[end:], marker
    raise KeyError(patch_id)


def plan_apply(states: tuple[PatchState, ...], texts: Mapping[str, str | None]) -> dict[str, str]:
    """New text per file for every PENDING patch (registry order). Only changed files returned."""
    current: dict[str, str] = {}
    for patch in (state.patch for state in states if state.status is Status.PENDING):
        for path in patch.files:
            before = current.get(path, texts[path])
            assert before is not None  # PENDING guarantees every file exists
            text = before
            for edit in (e for e in patch.edits if e.path == path):
                if text.count(edit.old) != 1:
                    raise PatcherError(
                        f"internal error: patch {patch.id} anchor {describe_block(edit.old)} is no longer "
                        f"unique in vllm/{path} after earlier edits; nothing was written"
                    )
                text = text.replace(edit.old, edit.new, 1)
            current[path] = add_marker(before, text, patch.id)
    return {path: text for path, text in current.items() if text != texts[path]}


def plan_revert(states: tuple[PatchState, ...], texts: Mapping[str, str | None]) -> dict[str, str]:
    """Original text per file for every APPLIED patch, verified against the recorded hash."""
    current: dict[str, str] = {}
    for patch in (state.patch for state in reversed(states) if state.status is Status.APPLIED):
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


Texts = Mapping[str, "str | None"]  # path relative to the vllm package -> file text (None: missing)


def present(probe: Probe, texts: Texts) -> bool:
    text = texts.get(probe.path)
    return text is not None and probe.matches(text)


def _missing_probe_lines(patch: Patch, texts: Texts) -> list[str]:
    return [
        f"upstream fix not found either: expected {p.description} in vllm/{p.path}"
        for p in patch.retired_when
        if not present(p, texts)
    ]


def _applied_state(patch: Patch, texts: Texts) -> PatchState | None:
    """APPLIED, UNRECOGNISED (marker but altered text), or None when our marker is absent."""
    marked = [{m.patch_id for m in find_markers(texts.get(path) or "")} for path in patch.files]
    if not patch.edits or not all(patch.id in ids for ids in marked):
        return None
    problems = tuple(
        f"vllm/{edit.path}: patched block {describe_block(edit.new)} found {count} times, expected 1"
        for edit in patch.edits
        if (count := (texts[edit.path] or "").count(edit.new)) != 1
    )
    if problems:
        return PatchState(
            patch, Status.UNRECOGNISED, "kimi-dflash marker present but the patched code was changed since", problems
        )
    return PatchState(patch, Status.APPLIED, f"applied (marker in {len(patch.files)} file(s))")


def evaluate(patch: Patch, texts: Texts) -> PatchState:
    if (applied := _applied_state(patch, texts)) is not None:
        return applied
    if patch.retired_when and all(present(p, texts) for p in patch.retired_when):
        pr, since = patch.upstream_pr, patch.upstream_since
        detail = (
            f"upstream PR {pr}, in vLLM >= {since}" if pr.startswith("#") else f"upstream in vLLM >= {since}; PR {pr}"
        )
        return PatchState(patch, Status.RETIRED, f"retired ({detail})")
    if not patch.edits:
        problems = _missing_probe_lines(patch, texts) + [patch.no_edit_reason]
        return PatchState(patch, Status.UNRECOGNISED, "upstream fix absent", tuple(problems))
    problems = [f"file vllm/{path} not found" for path in patch.files if texts.get(path) is None]
    for edit in patch.edits:
        text = texts.get(edit.path)
        if text is not None and (count := text.count(edit.old)) != 1:
            problems.append(f"vllm/{edit.path}: expected exactly one block {describe_block(edit.old)}, found {count}")
    if not problems:
        return PatchState(patch, Status.PENDING, f"pending ({len(patch.edits)} edit(s) in {len(patch.files)} file(s))")
    problems += _missing_probe_lines(patch, texts)
    return PatchState(patch, Status.UNRECOGNISED, "neither the old shape nor the upstream fix", tuple(problems))


def evaluate_all(patches: tuple[Patch, ...], texts: Texts) -> tuple[PatchState, ...]:
    return tuple(evaluate(patch, texts) for patch in patches)
