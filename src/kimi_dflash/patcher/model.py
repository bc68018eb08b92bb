"""The vocabulary of the patcher: what a patch is, and what we found when we looked for it (no I/O)."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Status(str, enum.Enum):
    RETIRED = "retired"  # the upstream fix is present: nothing to do, ever
    PENDING = "pending"  # old shape found, fix absent: `apply` would patch it
    APPLIED = "applied"  # our patched shape and marker found
    UNRECOGNISED = "unrecognised"  # neither shape: refuse, touch nothing


@dataclass(frozen=True)
class Edit:
    """Replace one exact block of text (the anchor, which must occur exactly once) in one file."""

    path: str  # relative to the vllm package directory, e.g. "v1/attention/selector.py"
    old: str
    new: str


def describe_block(text: str) -> str:
    """A short, human-readable name for a block of code: its first and last non-blank lines."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return repr("".join(lines))
    return f"{lines[0]!r} ... {lines[-1]!r} ({len(lines)} lines)"


@dataclass(frozen=True)
class Probe:
    """A feature probe: a regular expression searched (multiline) in one file of the tree. Probes look for a
    *feature* (a field, a keyword, a kernel constexpr), never a version string."""

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
    runtime: str | None = None  # name of the runtime (plugin) patch in kimi_dflash.patcher.runtime_patches
    runtime_hooks: tuple[Probe, ...] = ()  # what the runtime patch needs to find in the source
    needed_when: Need | None = None  # when a plan takes the code path this patch fixes
    no_edit_reason: str = ""  # why `edits` is empty, shown for an unrecognised tree

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(edit.path for edit in self.edits))

    @property
    def delivery(self) -> str:
        if not self.edits:
            return "none (upstream only)"
        return "plugin or file" if self.runtime else "file"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "title": self.title,
            "why": self.why,
            "upstream_pr": self.upstream_pr,
            "upstream_since": self.upstream_since,
            "delivery": self.delivery,
            "needed_when": str(self.needed_when or "always, where pending"),
            "files": ["vllm/" + path for path in self.files],
            "retired_when": [f"{probe.description} (vllm/{probe.path})" for probe in self.retired_when],
        }


@dataclass(frozen=True)
class PatchState:
    patch: Patch
    status: Status
    detail: str
    problems: tuple[str, ...] = ()  # for UNRECOGNISED: what was expected where

    def to_json(self) -> dict[str, object]:
        found = {"id": self.patch.id, "status": self.status.value, "detail": self.detail}
        return found | self.patch.to_json() | {"problems": list(self.problems)}  # id, status, detail first


class PatcherError(Exception):
    """A problem the user can fix; the CLI prints the message (no traceback) and exits with `exit_code`."""

    exit_code = 3


class UnrecognisedSource(PatcherError):
    exit_code = 2


class NotWritable(PatcherError):
    exit_code = 3
