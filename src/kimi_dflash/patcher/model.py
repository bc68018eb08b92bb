"""The vocabulary of the patcher: what a patch is, and what we found when we looked for it.

Plain frozen dataclasses, no I/O: the registry is data, the engine is functions over it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field


class Status(str, enum.Enum):
    """What a vLLM source tree needs for one patch."""

    RETIRED = "retired"  # the upstream fix is present: nothing to do, ever
    PENDING = "pending"  # old shape found, fix absent: `apply` would patch it
    APPLIED = "applied"  # our patched shape and marker found
    UNRECOGNISED = "unrecognised"  # neither shape: refuse, touch nothing


@dataclass(frozen=True)
class Edit:
    """Replace one exact block of text (the anchor) in one file.

    The anchor must occur exactly once in the file; anything else means the source is not the
    shape this patch was written for.
    """

    path: str  # relative to the vllm package directory, e.g. "v1/attention/selector.py"
    old: str
    new: str

    def first_line(self) -> str:
        return describe_block(self.old)


def describe_block(text: str) -> str:
    """A short, human-readable name for a block of code: its first and last non-blank lines."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "''"
    if len(lines) == 1:
        return repr(lines[0])
    return f"{lines[0]!r} ... {lines[-1]!r} ({len(lines)} lines)"


@dataclass(frozen=True)
class Probe:
    """A feature probe: a regular expression searched (multiline) in one file of the tree.

    Probes look for a *feature* (a field, a keyword, a kernel constexpr), never a version string.
    """

    path: str
    pattern: str
    description: str

    def matches(self, text: str) -> bool:
        return re.search(self.pattern, text, flags=re.MULTILINE) is not None


@dataclass(frozen=True)
class Need:
    """When a plan takes the code path a patch fixes: every condition holds. The conditions are words the
    compatibility rules evaluate over the plan and the vLLM source (rules/catalog/patches.py): "dflash",
    "mla target", "sliding-window drafter", "drafter metadata without causal", "drafter on <BACKEND>"."""

    text: str  # the condition in words (docs, status tables)
    conditions: tuple[str, ...]

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Patch:
    """One fix the recipe needs on some vLLM versions, and how to tell whether a tree needs it."""

    id: str
    title: str
    why: str
    upstream_pr: str  # the upstream change that retires this patch, e.g. "#39930"
    upstream_since: str  # first vLLM release that carries it (read from the wheels, for docs only)
    retired_when: tuple[Probe, ...]  # all must match for the patch to count as retired upstream
    edits: tuple[Edit, ...]  # empty: we carry no source patch for the old shape
    runtime: str | None = None  # name of the runtime (plugin) patch in kimi_dflash.patcher.runtime
    runtime_hooks: tuple[Probe, ...] = ()  # what the runtime patch needs to find in the source
    needed_when: Need | None = None  # when a plan takes the code path this patch fixes
    no_edit_reason: str = ""  # why `edits` is empty, shown for an unrecognised tree

    @property
    def files(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for edit in self.edits:
            seen.setdefault(edit.path, None)
        return tuple(seen)

    @property
    def delivery(self) -> str:
        if not self.edits:
            return "none (upstream only)"
        return "plugin or file" if self.runtime else "file"


@dataclass(frozen=True)
class PatchState:
    """The status of one patch in one tree, with the evidence behind it."""

    patch: Patch
    status: Status
    detail: str
    problems: tuple[str, ...] = field(default=())  # for UNRECOGNISED: what was expected where

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.patch.id,
            "status": self.status.value,
            "detail": self.detail,
            "title": self.patch.title,
            "upstream_pr": self.patch.upstream_pr,
            "upstream_since": self.patch.upstream_since,
            "delivery": self.patch.delivery,
            "needed_when": str(self.patch.needed_when or "always, where pending"),
            "files": ["vllm/" + path for path in self.patch.files],
            "problems": list(self.problems),
        }


class PatcherError(Exception):
    """A problem the user can fix; the CLI prints the message (no traceback) and exits with `exit_code`."""

    exit_code = 3


class UnrecognisedSource(PatcherError):
    exit_code = 2


class NotWritable(PatcherError):
    exit_code = 3
