"""What compare_results adds to the matched-load table: the speedup's confidence interval over repeats,
the speedup at the SLO, and how levels are keyed when a run was open-loop.

Speedup at the SLO: each side's *sustained load* is its highest load level (sessions, or request rate in
an open loop) whose SLO attainment is at least the threshold (default 0.9). The speedup at the SLO is
the candidate's output goodput (tok/s of requests meeting the SLOs) at its sustained level over the
baseline's at its own: "how much more useful work within the latency target", which may come from
different loads on the two sides (and says so). It needs both runs measured with the same ``--slo``.
"""

from __future__ import annotations

import math

from kimi_dflash.bench.goodput import describe
from kimi_dflash.bench.intervals import ratio_interval
from kimi_dflash.bench.result import BenchmarkResult, LevelResult, Settings

DEFAULT_ATTAINMENT = 0.9


def level_key(level: LevelResult) -> float:
    """Closed loop: the session count. Open loop: the request rate (inf: all at once)."""
    if level.open_loop is None:
        return level.sessions
    rate = level.open_loop.request_rate
    return math.inf if rate is None else rate


def levels_by_load(document: BenchmarkResult) -> dict[float, LevelResult]:
    return {level_key(level): level for level in document.results}


def load_label(key: float) -> str:
    if isinstance(key, int):
        return str(key)
    return "inf" if math.isinf(key) else f"{key:g}/s"


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
    interval = ratio_interval(
        [r.output_tok_s for r in candidate.repeat_results],
        [r.output_tok_s for r in baseline.repeat_results],
        confidence,
    )
    if interval is None or interval.low is None or interval.high is None:
        return "— (needs --repeats ≥ 2)"
    cell = f"[{interval.low:.2f}, {interval.high:.2f}]"
    return cell if interval.significant else cell + " not significant"


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
    b_levels, c_levels = levels_by_load(baseline), levels_by_load(candidate)
    rows = [
        title,
        "",
        f"SLO: {describe(b_slo or {})}; a load is sustained when at least {threshold:.0%} of its requests meet it.",
        "",
        "| run | sustained load | attainment | output tok/s | goodput tok/s | goodput req/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    found = {}
    for name, levels in ((baseline_name, b_levels), (candidate_name, c_levels)):
        best = sustained(levels, threshold)
        found[name] = best
        if best is None:
            rows.append(f"| {name} | none (no level reaches {threshold:.0%}) | — | — | — | — |")
            continue
        key, level = best
        gp = level.goodput
        assert gp is not None and gp.attainment is not None
        rows.append(
            f"| {name} | {load_label(key)} | {gp.attainment:.1%} | {_f(level.output_tok_s)} "
            f"| {_f(gp.output_goodput)} | {_f(gp.request_goodput, 2)} |"
        )
    rows.append("")
    b_best, c_best = found[baseline_name], found[candidate_name]
    if b_best is not None and c_best is not None:
        b_good = b_best[1].goodput.output_goodput if b_best[1].goodput else None
        c_good = c_best[1].goodput.output_goodput if c_best[1].goodput else None
        ratio = "—" if not b_good or c_good is None else f"{c_good / b_good:.2f}x"
        rows.append(
            f"**Speedup at the SLO: {ratio}** (goodput tok/s, {candidate_name} at {load_label(c_best[0])} vs "
            f"{baseline_name} at {load_label(b_best[0])}). Only levels that were measured count: a sweep with "
            "more levels can move the sustained load."
        )
    else:
        rows.append("**Speedup at the SLO: —** (a side sustains no measured load within the SLO)")
    rows.append("")
    return "\n".join(rows)


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"
