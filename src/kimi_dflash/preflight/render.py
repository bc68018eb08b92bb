"""Preflight results as aligned text lines: `[PASS] name  detail`, and `fix: ...` under each warn/fail."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kimi_dflash.preflight.results import STATUSES, CheckResult, exit_code

LABELS = {"pass": "[PASS]", "warn": "[WARN]", "fail": "[FAIL]"}
_INDENT = " " * (len("[PASS]") + 1)


def render(results: Sequence[CheckResult], *, summary: bool = True) -> str:
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
        lines.append(summary_line(results))
    return "\n".join(lines)


def summary_line(results: Sequence[CheckResult]) -> str:
    counts = Counter(r.status for r in results)
    tally = ", ".join(f"{counts[s]} {s}" for s in STATUSES)
    verdict = "FAILED" if exit_code(results) else "ok"
    return f"preflight {verdict}: {tally}"
