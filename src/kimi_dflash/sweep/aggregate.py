"""The sweep's aggregate: one markdown table at matched concurrency and the plots (pure table, plots via matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.bench.result import BenchmarkResult, LevelResult
from kimi_dflash.sweep.grid import SPEC_TOKENS
from kimi_dflash.sweep.state import Failure

SUMMARY_FILE = "summary.md"


@dataclass(frozen=True)
class Cell:
    """One point at one concurrency level."""

    point: str
    overrides: dict[str, str]
    sessions: int
    output_tok_s: float
    per_user_tok_s: float | None  # mean of 1/TPOT
    tpot_ms: float | None  # median
    ttft_p95_ms: float | None
    acceptance: float | None
    acceptance_length: float | None

    @property
    def label(self) -> str:
        """What the point set, as a reader writes it ("NUM_SPECULATIVE_TOKENS=2"); the point's file name else."""
        return " ".join(f"{k}={v}" for k, v in self.overrides.items()) or self.point


def _labels(found: Sequence[Cell]) -> dict[str, str]:
    return {c.point: c.label for c in found}


def _cell(name: str, result: BenchmarkResult, level: LevelResult) -> Cell | None:
    if level.output_tok_s is None or level.partial:
        return None
    spec = level.spec_decode
    return Cell(
        point=name,
        overrides=dict(result.server_config.overrides) if result.server_config else {},
        sessions=level.sessions,
        output_tok_s=level.output_tok_s,
        per_user_tok_s=level.per_user_tok_s.mean,
        tpot_ms=level.tpot_ms.p50,
        ttft_p95_ms=level.ttft_ms.p95,
        acceptance=spec.acceptance_rate if spec else None,
        acceptance_length=spec.acceptance_length if spec else None,
    )


def cells(results: Sequence[tuple[str, BenchmarkResult]]) -> list[Cell]:
    found = []
    for name, result in results:
        for level in result.results:
            cell = _cell(name, result, level)
            if cell is not None:
                found.append(cell)
    return found


def pareto_front(found: Sequence[Cell]) -> list[Cell]:
    """Cells no other cell beats on both aggregate and per-user tok/s."""
    rated = [c for c in found if c.per_user_tok_s is not None]

    def dominated(c: Cell) -> bool:
        return any(
            o is not c and o.output_tok_s >= c.output_tok_s and o.per_user_tok_s >= c.per_user_tok_s  # type: ignore[operator]
            and (o.output_tok_s > c.output_tok_s or o.per_user_tok_s > c.per_user_tok_s)  # type: ignore[operator]
            for o in rated
        )  # fmt: skip

    return sorted((c for c in rated if not dominated(c)), key=lambda c: c.output_tok_s)


def _baseline_of(cell: Cell, found: Sequence[Cell]) -> Cell | None:
    """The autoregressive point (NUM_SPECULATIVE_TOKENS=0) with the same other overrides, same concurrency."""
    if SPEC_TOKENS not in cell.overrides or cell.overrides[SPEC_TOKENS] == "0":
        return None
    wanted = {**cell.overrides, SPEC_TOKENS: "0"}
    return next((c for c in found if c.overrides == wanted and c.sessions == cell.sessions), None)


def _f(value: float | None, digits: int = 1, scale: float = 1.0, suffix: str = "") -> str:
    return "—" if value is None else f"{value * scale:.{digits}f}{suffix}"


def render_table(found: Sequence[Cell], failures: Sequence[Failure] = ()) -> str:
    """Markdown: rows grouped by concurrency (only equal concurrencies are compared), ★ on the Pareto front."""
    front = {(c.point, c.sessions) for c in pareto_front(found)}
    lines = [
        (
            "| sessions | point | output tok/s | vs no speculation | per-user tok/s | TPOT p50 ms | TTFT p95 ms "
            "| acceptance | τ | Pareto |"
        ),
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for sessions in sorted({c.sessions for c in found}):
        for cell in sorted((c for c in found if c.sessions == sessions), key=lambda c: c.point):
            base = _baseline_of(cell, found)
            ratio = f"{cell.output_tok_s / base.output_tok_s:.2f}x" if base and base.output_tok_s else "—"
            lines.append(
                f"| {sessions} | {cell.label} | {_f(cell.output_tok_s)} | {ratio} | {_f(cell.per_user_tok_s)} "
                f"| {_f(cell.tpot_ms)} | {_f(cell.ttft_p95_ms, 0)} | {_f(cell.acceptance, 1, 100, ' %')} "
                f"| {_f(cell.acceptance_length, 2)} | {'★' if (cell.point, sessions) in front else ''} |"
            )
    for failure in failures:
        lines.append(f"\nFAILED {failure.point} ({failure.stage}): {failure.detail}")
    return "\n".join(lines) + "\n"


def write_plots(found: Sequence[Cell], out: Path) -> list[Path]:
    """tok_s_vs_concurrency.png (one line per point) and pareto.png (aggregate vs per-user, front marked)."""
    from kimi_dflash.bench.plots import pyplot, save_figure

    plt = pyplot()
    written = []
    labels = _labels(found)  # legends say what each point set, not its file name
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for point in sorted({c.point for c in found}):
        series = sorted((c.sessions, c.output_tok_s) for c in found if c.point == point)
        ax.plot([s for s, _ in series], [v for _, v in series], marker="o", label=labels[point])
    ax.set(title="Aggregate output tok/s by concurrency", xlabel="concurrent sessions", ylabel="output tokens / s")
    ax.set_xticks(sorted({c.sessions for c in found}))  # sessions are whole numbers: no 2.25-session ticks
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    written.append(save_figure(fig, out / "tok_s_vs_concurrency.png"))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    rated = [c for c in found if c.per_user_tok_s is not None]
    for point in sorted({c.point for c in rated}):
        mine = [c for c in rated if c.point == point]
        ax.scatter([c.per_user_tok_s for c in mine], [c.output_tok_s for c in mine], label=labels[point])
        for c in mine:
            ax.annotate(str(c.sessions), (c.per_user_tok_s, c.output_tok_s), fontsize=7)
    front = pareto_front(found)
    ax.plot([c.per_user_tok_s for c in front], [c.output_tok_s for c in front], "k--", label="Pareto front")
    ax.set(title="Aggregate vs per-user tok/s (labels: sessions)", xlabel="per-user tok/s (1 / TPOT, mean)",
           ylabel="aggregate output tok/s")  # fmt: skip
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    written.append(save_figure(fig, out / "pareto.png"))
    plt.close(fig)
    return written
