"""A check's outcome (pass / warn / fail, each warn and fail with its fix), rendered as aligned lines, and the exit
code for a list of them: the vocabulary of preflight's machine checks and of the compatibility rules' findings."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Status = Literal["pass", "warn", "fail"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail")
LABELS = {"pass": "[PASS]", "warn": "[WARN]", "fail": "[FAIL]"}
_INDENT = " " * (len("[PASS]") + 1)


@dataclass(frozen=True)
class Remedy:
    """What a pass relies on beyond vLLM, and who brings it: the vLLM plugin at runtime, or the launcher before vLLM
    starts (a file patch, the drafter's RoPE overlay, a config key or environment variable set to ``value``)."""

    kind: Literal["plugin", "file patch", "overlay", "config", "env"]
    name: str
    value: object = field(default=None, compare=False)

    def __str__(self) -> str:
        if self.kind in ("plugin", "file patch"):
            return f"{self.kind} {self.name}"
        return f"launcher: {self.name}" + ("" if self.kind == "overlay" else f"={self.value}")


@dataclass(frozen=True)
class CheckResult:
    """What one check found: ``detail`` says what was seen (a value, a count, a path); ``fix`` is the exact action
    that clears a warn/fail line (a command to run or a config key to change), None when there is nothing to do. A
    rule's finding (named by the engine) names what a pass ``relies`` on, a fail's ``short`` reason for the matrix."""

    name: str
    status: Status
    detail: str
    fix: str | None = None
    relies: tuple[Remedy, ...] = ()
    short: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"CheckResult.status must be one of {STATUSES}, got {self.status!r}")


def passed(detail: str, relies: tuple[Remedy, ...] = (), *, name: str = "") -> CheckResult:
    return CheckResult(name, "pass", detail, None, relies)


def warned(detail: str, fix: str | None = None, *, name: str = "") -> CheckResult:
    return CheckResult(name, "warn", detail, fix)


def failed(detail: str, fix: str, short: str = "", *, name: str = "") -> CheckResult:
    return CheckResult(name, "fail", detail, fix, short=short)


def exit_code(results: Iterable[CheckResult]) -> int:
    return 1 if any(r.status == "fail" for r in results) else 0


def render(results: Sequence[CheckResult], *, summary: bool = True) -> str:
    """`[PASS] name  detail` lines, names aligned, with `fix: ...` under each warn/fail."""
    if not results:
        return "preflight: no checks ran"
    width = max(len(r.name) for r in results)
    lines = []
    for result in results:
        detail_lines = result.detail.splitlines() or [""]
        lines.append(f"{LABELS[result.status]} {result.name.ljust(width)}  {detail_lines[0]}".rstrip())
        lines.extend(f"{_INDENT}{' ' * (width + 2)}{more}" for more in detail_lines[1:])
        if result.fix and result.status != "pass":
            fix_lines = result.fix.splitlines()
            lines.append(f"{_INDENT}fix: {fix_lines[0]}")
            lines.extend(f"{_INDENT}     {more}" for more in fix_lines[1:])
    if summary:
        counts = Counter(r.status for r in results)
        tally = ", ".join(f"{counts[s]} {s}" for s in STATUSES)
        lines.append(f"preflight {'FAILED' if exit_code(results) else 'ok'}: {tally}")
    return "\n".join(lines)
