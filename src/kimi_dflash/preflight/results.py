"""One preflight check's outcome, and the process exit code for a list of them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Status = Literal["pass", "warn", "fail"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail")


@dataclass(frozen=True)
class CheckResult:
    """What one check found.

    ``detail`` says what was seen (a value, a count, a path); ``fix`` is the exact action that clears a
    warn/fail line (a command to run or a config key to change) and is None when there is nothing to do.
    """

    name: str
    status: Status
    detail: str
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"CheckResult.status must be one of {STATUSES}, got {self.status!r}")


def passed(name: str, detail: str) -> CheckResult:
    return CheckResult(name, "pass", detail)


def warned(name: str, detail: str, fix: str | None = None) -> CheckResult:
    return CheckResult(name, "warn", detail, fix)


def failed(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, "fail", detail, fix)


def exit_code(results: Iterable[CheckResult]) -> int:
    """0 when no check failed (warnings do not block a start), 1 otherwise."""
    return 1 if any(r.status == "fail" for r in results) else 0
