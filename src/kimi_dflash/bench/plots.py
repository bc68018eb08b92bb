"""PNG plots for a comparison. matplotlib is imported here only, so the benchmark itself never needs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kimi_dflash.bench.compare import Figure, Run, e2el_p95, output_tok_s, per_user_mean, ttft_p95
from kimi_dflash.core.atomic_write import replacing
from kimi_dflash.core.errors import UserError


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on servers and CI
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("--plots needs matplotlib: pip install matplotlib (or the project's [report] extra).") from None
    return plt


def _series(run: Run, figure: Figure) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for sessions, level in sorted(run.levels.items()):
        value = figure(level)
        if value is not None:
            xs.append(sessions)
            ys.append(float(value))
    return xs, ys


def save_figure(fig: Any, path: Path) -> Path:
    with replacing(path, suffix=".png") as temporary:
        fig.savefig(temporary, dpi=120, bbox_inches="tight")
    return path


def write_plots(runs: list[Run], out_dir: Path) -> list[Path]:
    """throughput.png, per_user.png, latency_p95.png and (if any run speculates) acceptance.png."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def line_plot(filename: str, title: str, ylabel: str, figure: Figure) -> None:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for run in runs:
            xs, ys = _series(run, figure)
            ax.plot(xs, ys, marker="o", label=run.name)
        ax.set_title(title)
        ax.set_xlabel("concurrent sessions")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend()
        written.append(save_figure(fig, out_dir / filename))
        plt.close(fig)

    line_plot("throughput.png", "Aggregate output throughput", "output tokens / s", output_tok_s)
    line_plot("per_user.png", "Per-user decode speed (1 / TPOT, mean)", "tokens / s per user", per_user_mean)

    fig, (ax_ttft, ax_e2el) = plt.subplots(1, 2, figsize=(10, 4.2))
    for run in runs:
        ax_ttft.plot(*_series(run, ttft_p95), marker="o", label=run.name)
        ax_e2el.plot(*_series(run, e2el_p95), marker="o", label=run.name)
    ax_ttft.set(title="TTFT P95", xlabel="concurrent sessions", ylabel="ms")
    ax_e2el.set(title="End-to-end latency P95", xlabel="concurrent sessions", ylabel="s")
    for ax in (ax_ttft, ax_e2el):
        ax.grid(True, alpha=0.3)
        ax.legend()
    written.append(save_figure(fig, out_dir / "latency_p95.png"))
    plt.close(fig)

    spec_levels = [
        (run.name, sessions, level.spec_decode)
        for run in runs
        for sessions, level in sorted(run.levels.items())
        if level.spec_decode
    ]
    if spec_levels:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for name, sessions, spec in spec_levels:
            per_pos = spec.per_position
            ax.plot(range(len(per_pos)), per_pos, marker="o", label=f"{name} @ {sessions}")
        ax.set_title("Per-position acceptance (accepted at k / drafts)")
        ax.set_xlabel("draft position k")
        ax.set_ylabel("acceptance")
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
        ax.legend()
        written.append(save_figure(fig, out_dir / "acceptance.png"))
        plt.close(fig)
    return written
