"""The report's PNG plots (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kimi_dflash.advisor.model import weighted_per_position
from kimi_dflash.qualify.documents import AcceptanceRow
from kimi_dflash.sweep import aggregate

ACCEPTANCE_PNG = "acceptance_by_position.png"
PLOT_FILES = ("tok_s_vs_concurrency.png", "pareto.png", ACCEPTANCE_PNG)  # in report order


def acceptance_by_k(rows: Sequence[AcceptanceRow]) -> dict[int, list[float]]:
    """Per k, acceptance at each position over every concurrency, weighted by drafts (pure)."""
    return {
        k: list(weighted_per_position([(r.drafts, r.per_position) for r in rows if r.k == k]))
        for k in sorted({r.k for r in rows})
    }


def write_acceptance_plot(rows: Sequence[AcceptanceRow], out: Path) -> Path:
    from kimi_dflash.bench.plots import line_chart

    series = {f"k={k}": (range(1, len(v) + 1), [p * 100 for p in v]) for k, v in acceptance_by_k(rows).items()}
    title = "Acceptance by draft position (all concurrencies)"
    return line_chart(
        out / ACCEPTANCE_PNG,
        series,
        title,
        "draft position",
        "accepted / drafts (%)",
        legend_size=8,
        ylim=(0, 100),
        integer_x=True,
    )


def write_all(cells: Sequence[aggregate.Cell], acceptance_rows: Sequence[AcceptanceRow], out: Path) -> list[Path]:
    written: list[Path] = []
    if cells:
        written += aggregate.write_plots(cells, out)
    if acceptance_rows:
        written.append(write_acceptance_plot(acceptance_rows, out))
    return written
