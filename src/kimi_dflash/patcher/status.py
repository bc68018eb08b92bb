"""Decide, from file contents alone, what a vLLM tree needs for each patch (pure functions).

Order of questions, per patch: is our patched shape there (applied)? is the upstream fix there
(retired)? is the exact old shape there (pending)? Otherwise the source is unrecognised and the
answer lists what was expected where.
"""

from __future__ import annotations

from collections.abc import Mapping

from kimi_dflash.patcher.model import Patch, PatchState, Probe, Status, describe_block
from kimi_dflash.patcher.plan import has_marker

Texts = Mapping[str, "str | None"]  # path relative to the vllm package -> file text (None: missing)


def present(probe: Probe, texts: Texts) -> bool:
    """Whether the probe's feature is in the tree."""
    text = texts.get(probe.path)
    return text is not None and probe.matches(text)


def _retired_detail(patch: Patch) -> str:
    if patch.upstream_pr.startswith("#"):
        return f"retired (upstream PR {patch.upstream_pr}, in vLLM >= {patch.upstream_since})"
    return f"retired (upstream in vLLM >= {patch.upstream_since}; PR {patch.upstream_pr})"


def _missing_probe_lines(patch: Patch, texts: Texts) -> list[str]:
    return [
        f"upstream fix not found either: expected {p.description} in vllm/{p.path}"
        for p in patch.retired_when
        if not present(p, texts)
    ]


def _applied_state(patch: Patch, texts: Texts) -> PatchState | None:
    """APPLIED, UNRECOGNISED (marker but altered text), or None when our marker is absent."""
    if not patch.edits or not all(has_marker(texts.get(path) or "", patch.id) for path in patch.files):
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
    applied = _applied_state(patch, texts)
    if applied is not None:
        return applied
    if patch.retired_when and all(present(p, texts) for p in patch.retired_when):
        return PatchState(patch, Status.RETIRED, _retired_detail(patch))
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
