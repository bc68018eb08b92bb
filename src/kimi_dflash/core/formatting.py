"""The one number formatter: every table, report and progress line shows its figures through these functions, so a
figure looks the same wherever it appears. Missing values read "—" in tables and stay empty in CSV. Timestamps too."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

MISSING = "—"


def number(value: float | None, digits: int = 1, suffix: str = "", grouped: bool = False) -> str:
    """``12.3`` (``grouped``: ``1,230,368``, the thousands style of the docs)."""
    if value is None:
        return MISSING
    return f"{value:,.{digits}f}{suffix}" if grouped else f"{value:.{digits}f}{suffix}"


def percent(fraction: float | None, digits: int = 1, signed: bool = False) -> str:
    """A fraction as a percentage: 0.712 -> ``71.2 %`` (``signed``: ``+71.2 %``)."""
    return MISSING if fraction is None else f"{fraction * 100:{'+' if signed else ''}.{digits}f} %"


def ratio(value: float | None, digits: int = 2) -> str:
    """A speedup: ``1.10x``."""
    return number(value, digits, "x")


def general(value: float | None) -> str:
    """As the value is written: ``0.75``, ``507.6``, ``2`` for 2.0, ``1048576`` (no exponent)."""
    if value is None:
        return MISSING
    return str(int(value)) if float(value).is_integer() else str(value)


def interval(low: float | None, high: float | None, digits: int = 2) -> str:
    """``[1.41, 1.58]``."""
    return MISSING if low is None or high is None else f"[{low:.{digits}f}, {high:.{digits}f}]"


def seconds(value: float | None) -> str:
    """A short wait: ``4.2 s`` under ten seconds, whole seconds above."""
    return MISSING if value is None else number(value, 1 if value < 10 else 0, " s")


def duration(value: float) -> str:
    """Whole seconds for long waits (ETAs, elapsed wall time): ``45s``, ``3m05s``, ``1h02m``."""
    whole = max(0, round(value))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def utc_now() -> str:
    """Now, as every document records a time: UTC, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def raw(value: float | str | None, digits: int = 6) -> str:
    """A CSV cell: full precision (``digits`` decimals, trailing zeros dropped), empty when missing or not finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Fmt:
    """How a figure is shown: a plain number, a fraction as a percentage or a ratio, with its precision."""

    digits: int = 1
    kind: Literal["number", "percent", "ratio"] = "number"

    def __call__(self, value: float | str | None) -> str:
        if isinstance(value, str):
            return value
        show = {"number": number, "percent": percent, "ratio": ratio}[self.kind]
        return show(value, self.digits)


ALIGN = {"l": "---", "r": "---:", "c": ":---:"}


def markdown_table(header: Sequence[str], align: str, rows: Iterable[Sequence[object]]) -> list[str]:
    """``align``: one letter per column, l(eft), r(ight) or c(entre); a "|" in a cell is escaped."""

    def line(cells: Iterable[object]) -> str:
        return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"

    return [line(header), "|" + "|".join(ALIGN[a] for a in align) + "|", *map(line, rows)]


def text_row(cells: Sequence[str], widths: Sequence[int], prefix: str = "") -> str:
    """One line of a fixed-width text table: cells right-aligned, two spaces apart."""
    return prefix + "  ".join(cell.rjust(width) for cell, width in zip(cells, widths))
