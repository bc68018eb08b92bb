"""PNG plots (compare, sweep, qualify); the only module that imports matplotlib."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimi_dflash.bench.columns import E2EL, OUTPUT_TOK_S, PER_USER, TTFT, Column
from kimi_dflash.core.atomic_write import replacing
from kimi_dflash.core.errors import UserError

if TYPE_CHECKING:
    from kimi_dflash.bench.compare import Run

Series = Mapping[str, tuple[Sequence[float], Sequence[float]]]  # legend -> (xs, ys)


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on servers and CI
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("--plots needs matplotlib: pip install matplotlib (or the project's [report] extra).") from None
    return plt


def _series(run: Run, column: Column) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for sessions, level in sorted(run.levels.items()):
        value = column.value(level)
        if value is not None:
            xs.append(sessions)
            ys.append(float(value))
    return xs, ys


def save_figure(fig: Any, path: Path) -> Path:
    with replacing(path, suffix=".png") as temporary:
        fig.savefig(temporary, dpi=120, bbox_inches="tight")
    return path


def draw_lines(ax: Any, series: Series, title: str, xlabel: str, ylabel: str, legend_size: float | None = None) -> None:
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=label)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=legend_size)


def line_chart(path: Path, series: Series, title: str, xlabel: str, ylabel: str, **options: Any) -> Path:
    """One line per series, markers at the points; ``options``: legend_size, xticks, ylim, integer_x."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    draw_lines(ax, series, title, xlabel, ylabel, options.get("legend_size"))
    if "xticks" in options:
        ax.set_xticks(options["xticks"])
    if "ylim" in options:
        ax.set_ylim(*options["ylim"])
    if options.get("integer_x"):
        ax.xaxis.get_major_locator().set_params(integer=True)
    save_figure(fig, path)
    plt.close(fig)
    return path


def write_plots(runs: list[Run], out_dir: Path) -> list[Path]:
    """throughput.png, per_user.png, latency_p95.png and (if any run speculates) acceptance.png."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)

    def by_run(column: Column) -> dict[str, tuple[list[float], list[float]]]:
        return {run.name: _series(run, column) for run in runs}

    x_label, written = "concurrent sessions", []
    for name, column, title, ylabel in (
        ("throughput.png", OUTPUT_TOK_S, "Aggregate output throughput", "output tokens / s"),
        ("per_user.png", PER_USER["mean"], "Per-user decode speed (1 / TPOT, mean)", "tokens / s per user"),
    ):
        written.append(line_chart(out_dir / name, by_run(column), title, x_label, ylabel))
    fig, (ax_ttft, ax_e2el) = plt.subplots(1, 2, figsize=(10, 4.2))
    draw_lines(ax_ttft, by_run(TTFT["p95"]), "TTFT P95", x_label, "ms")
    draw_lines(ax_e2el, by_run(E2EL["p95"]), "End-to-end latency P95", x_label, "s")
    written.append(save_figure(fig, out_dir / "latency_p95.png"))
    plt.close(fig)

    spec = {
        f"{run.name} @ {sessions}": (range(len(level.spec_decode.per_position)), level.spec_decode.per_position)
        for run in runs
        for sessions, level in sorted(run.levels.items())
        if level.spec_decode
    }
    if spec:
        title = "Per-position acceptance (accepted at k / drafts)"
        written.append(
            line_chart(out_dir / "acceptance.png", spec, title, "draft position k", "acceptance", ylim=(0, 1))
        )
    return written
