"""The runs a comparison reads (compare.py and plots.py both do), and what it adds to the matched-load table: the
speedup's confidence interval over repeats and the speedup at the SLO (docs/benchmark.md, "Comparing runs")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.bench import columns
from kimi_dflash.bench.goodput import describe
from kimi_dflash.bench.intervals import ratio_interval
from kimi_dflash.bench.result import BenchmarkResult, LevelResult, Settings, load_result
from kimi_dflash.core.formatting import MISSING, interval, markdown_table, percent, ratio

DEFAULT_ATTAINMENT = 0.9


@dataclass(frozen=True)
class Run:
    path: Path
    name: str
    document: BenchmarkResult

    @property
    def levels(self) -> dict[float, LevelResult]:
        """By session count; by request rate for an open-loop run."""
        return self.document.levels


def load_runs(paths: list[Path]) -> list[Run]:
    runs = []
    seen: set[str] = set()
    for path in paths:
        document = load_result(path)
        name = document.run.label or path.stem
        if name in seen:
            name = f"{name} ({path.name})"
        seen.add(name)
        runs.append(Run(path=path, name=name, document=document))
    return runs


def open_loop_differences(a: Settings, b: Settings) -> list[str]:
    """Differences in the load's shape that make two runs' levels different things."""
    oa, ob = a.open_loop, b.open_loop
    if oa is None and ob is None:
        return []
    if (oa is None) != (ob is None):
        return ["load: closed loop (--sessions) vs open loop (--request-rate)"]
    assert oa is not None and ob is not None
    keys = ("arrival", "burstiness", "max_concurrency", "sessions_per_level", "think_time_s", "think_time_dist")
    pairs = [(key, getattr(oa, key), getattr(ob, key)) for key in keys]
    return [f"{key}: {x!r} vs {y!r}" for key, x, y in pairs if x != y]


def speedup_interval_cell(baseline: LevelResult, candidate: LevelResult, confidence: float) -> str:
    """``[1.41, 1.58]`` for output tok/s over repeats; ``[0.97, 1.05] not significant`` when it spans 1.0."""
    found = ratio_interval(
        [r.output_tok_s for r in candidate.repeat_results],
        [r.output_tok_s for r in baseline.repeat_results],
        confidence,
    )
    if found is None or found.low is None or found.high is None:
        return "— (needs --repeats ≥ 2)"
    return interval(found.low, found.high) + ("" if found.significant else " not significant")


def sustained(levels: dict[float, LevelResult], threshold: float) -> tuple[float, LevelResult] | None:
    """The highest load whose SLO attainment is at least ``threshold`` (None: no level does)."""
    ok = [
        (key, level)
        for key, level in levels.items()
        if level.goodput is not None and level.goodput.attainment is not None and level.goodput.attainment >= threshold
    ]
    return max(ok, key=lambda item: item[0]) if ok else None


def slo_section(
    baseline_name: str,
    baseline: BenchmarkResult,
    candidate_name: str,
    candidate: BenchmarkResult,
    threshold: float = DEFAULT_ATTAINMENT,
) -> str:
    """The "speedup at the SLO" section (empty when neither run measured an SLO)."""
    b_slo, c_slo = baseline.settings.slo, candidate.settings.slo
    if not b_slo and not c_slo:
        return ""
    title = f"## {candidate_name} vs {baseline_name} at the SLO"
    if b_slo != c_slo:
        return (
            f"{title}\n\nNot compared: the runs measured different SLOs ({baseline_name}: "
            f"{describe(b_slo or {}) or 'none'}; {candidate_name}: {describe(c_slo or {}) or 'none'}). "
            "Re-run both with the same --slo.\n"
        )
    b_levels, c_levels = baseline.levels, candidate.levels
    rows, found = [], {}
    for name, levels in ((baseline_name, b_levels), (candidate_name, c_levels)):
        found[name] = best = sustained(levels, threshold)
        if best is None:
            rows.append([name, f"none (no level reaches {percent(threshold, 0)})"] + [MISSING] * len(columns.SLO))
        else:
            rows.append([name, columns.LEVEL.cell(best[1])] + [column.cell(best[1]) for column in columns.SLO])
    lines = [
        title,
        "",
        f"SLO: {describe(b_slo or {})}; a load is sustained when at least {percent(threshold, 0)} of its requests "
        "meet it.",
        "",
        *markdown_table(
            ["run", "sustained load", *(c.header for c in columns.SLO)], "lr" + "r" * len(columns.SLO), rows
        ),
        "",
    ]
    b_best, c_best = found[baseline_name], found[candidate_name]
    if b_best is not None and c_best is not None:
        speedup = columns.OUTPUT_GOODPUT.over(c_best[1], b_best[1])
        lines.append(
            f"**Speedup at the SLO: {ratio(speedup)}** (goodput tok/s, {candidate_name} at "
            f"{columns.LEVEL.cell(c_best[1])} vs {baseline_name} at {columns.LEVEL.cell(b_best[1])}). Only levels that "
            "were measured count: a sweep with more levels can move the sustained load."
        )
    else:
        lines.append("**Speedup at the SLO: —** (a side sustains no measured load within the SLO)")
    lines.append("")
    return "\n".join(lines)
