"""The sweep's aggregate: one markdown table at matched concurrency (``columns.SWEEP``) and the plots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.bench import columns
from kimi_dflash.bench.result import BenchmarkResult, LevelResult
from kimi_dflash.config.schema import KEY
from kimi_dflash.core.formatting import markdown_table, ratio
from kimi_dflash.sweep.state import Failure

SUMMARY_FILE = "summary.md"


@dataclass(frozen=True)
class Cell:
    """One point at one concurrency level (a finished level: its output tok/s is known)."""

    point: str
    overrides: dict[str, str]
    level: LevelResult

    @property
    def sessions(self) -> int:
        return self.level.sessions

    @property
    def output_tok_s(self) -> float:
        return self.level.output_tok_s or 0.0

    @property
    def per_user_tok_s(self) -> float | None:  # mean of 1/TPOT
        return self.level.per_user_tok_s.mean

    @property
    def label(self) -> str:
        """What the point set, as a reader writes it ("NUM_SPECULATIVE_TOKENS=2"); the point's file name else."""
        return " ".join(f"{k}={v}" for k, v in self.overrides.items()) or self.point


def cells(results: Sequence[tuple[str, BenchmarkResult]]) -> list[Cell]:
    return [
        Cell(name, dict(result.server_config.overrides) if result.server_config else {}, level)
        for name, result in results
        for level in result.results
        if level.output_tok_s is not None and not level.partial
    ]


def pareto_front(found: Sequence[Cell]) -> list[Cell]:
    """Cells no other cell beats on both aggregate and per-user tok/s."""
    rated = [c for c in found if c.per_user_tok_s is not None]

    def dominated(c: Cell) -> bool:
        return any(
            o is not c
            and o.output_tok_s >= c.output_tok_s
            and o.per_user_tok_s >= c.per_user_tok_s  # type: ignore[operator]
            and (o.output_tok_s > c.output_tok_s or o.per_user_tok_s > c.per_user_tok_s)  # type: ignore[operator]
            for o in rated
        )

    return sorted((c for c in rated if not dominated(c)), key=lambda c: c.output_tok_s)


def _baseline_of(cell: Cell, found: Sequence[Cell]) -> Cell | None:
    """The autoregressive point (NUM_SPECULATIVE_TOKENS=0) with the same other overrides, same concurrency."""
    if KEY.NUM_SPECULATIVE_TOKENS not in cell.overrides or cell.overrides[KEY.NUM_SPECULATIVE_TOKENS] == "0":
        return None
    wanted = {**cell.overrides, KEY.NUM_SPECULATIVE_TOKENS: "0"}
    return next((c for c in found if c.overrides == wanted and c.sessions == cell.sessions), None)


def render_table(found: Sequence[Cell], failures: Sequence[Failure] = ()) -> str:
    """Markdown grouped by concurrency (only equal ones compare), ★ on the Pareto front, ratios over k=0 at each."""
    front = {(c.point, c.sessions) for c in pareto_front(found)}
    first, *rest = columns.SWEEP
    header = ["sessions", "point", first.header, "vs no speculation", *(c.header for c in rest), "Pareto"]
    rows = []
    for cell in sorted(found, key=lambda c: (c.sessions, c.point)):
        base = _baseline_of(cell, found)
        speedup = ratio(first.over(cell.level, base.level) if base else None)
        pareto = "★" if (cell.point, cell.sessions) in front else ""
        rows.append(
            [cell.sessions, cell.label, first.cell(cell.level), speedup, *(c.cell(cell.level) for c in rest), pareto]
        )
    lines = markdown_table(header, "rl" + "r" * (len(header) - 3) + "c", rows)
    lines += [f"\nFAILED {failure.point} ({failure.stage}): {failure.detail}" for failure in failures]
    return "\n".join(lines) + "\n"


def write_plots(found: Sequence[Cell], out: Path) -> list[Path]:
    """tok_s_vs_concurrency.png (one line per point) and pareto.png (aggregate vs per-user, front marked)."""
    from kimi_dflash.bench.plots import line_chart, pyplot, save_figure

    plt = pyplot()
    labels = {c.point: c.label for c in found}  # legends say what each point set, not its file name
    series = {}
    for point in sorted({c.point for c in found}):
        points = sorted((c.sessions, c.output_tok_s) for c in found if c.point == point)
        series[labels[point]] = ([s for s, _ in points], [v for _, v in points])
    sessions = sorted({c.sessions for c in found})  # whole numbers: no 2.25-session ticks
    title, chart = "Aggregate output tok/s by concurrency", out / "tok_s_vs_concurrency.png"
    labels_xy = ("concurrent sessions", "output tokens / s")
    written = [line_chart(chart, series, title, *labels_xy, legend_size=7, xticks=sessions)]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    rated = [c for c in found if c.per_user_tok_s is not None]
    for point in sorted({c.point for c in rated}):
        mine = [c for c in rated if c.point == point]
        ax.scatter([c.per_user_tok_s for c in mine], [c.output_tok_s for c in mine], label=labels[point])
        for c in mine:
            ax.annotate(str(c.sessions), (c.per_user_tok_s, c.output_tok_s), fontsize=7)
    front = pareto_front(found)
    ax.plot([c.per_user_tok_s for c in front], [c.output_tok_s for c in front], "k--", label="Pareto front")
    ax.set(title="Aggregate vs per-user tok/s (labels: sessions)", xlabel="per-user tok/s (1 / TPOT, mean)")
    ax.set(ylabel="aggregate output tok/s")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    written.append(save_figure(fig, out / "pareto.png"))
    plt.close(fig)
    return written
