"""What a level gains from the optional analyses: extra percentiles, SLO goodput, intervals over repeats,
open-loop arrival and queueing figures. Pure functions of the level's records and windows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from kimi_dflash.bench import goodput as goodput_mod
from kimi_dflash.bench.columns import OUTPUT_TOK_S, PER_USER
from kimi_dflash.bench.intervals import mean_interval
from kimi_dflash.bench.metrics import Window, chunk_gaps, e2el, summarize, tpot, ttft
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.result import Distribution, LevelResult, OpenLoopLevel, RepeatIntervals
from kimi_dflash.core.formatting import interval, number, percent

if TYPE_CHECKING:
    from kimi_dflash.bench.settings import Settings


def summary_lines(level: LevelResult) -> list[str]:
    """Extra lines for the printed level table: open-loop queueing, SLO attainment, intervals."""
    lines = []
    ol = level.open_loop
    if ol is not None:
        queue = ol.queue_delay_ms
        lines.append(
            f"open loop: {ol.sessions_started} conversations, achieved {number(ol.achieved_rate, 2, '/s')}, max in "
            f"flight {ol.max_in_flight}; local queueing p50/p99 {number(queue.p50)}/{number(queue.p99)} ms"
            f" (cap wait p99 {number(ol.cap_wait_ms.p99)}, timer lag p99 {number(ol.schedule_lag_ms.p99)})"
        )
    gp = level.goodput
    if gp is not None and gp.attainment is not None:
        lines.append(
            f"SLO ({goodput_mod.describe(gp.slo)}): {percent(gp.attainment)} met ({gp.met}/{gp.requests}); goodput "
            f"{number(gp.request_goodput or 0, 2)} req/s, {number(gp.output_goodput or 0)} tok/s"
        )
    ci = level.intervals
    for column, block in ((OUTPUT_TOK_S, ci.output_tok_s), (PER_USER["mean"], ci.per_user_tok_s)) if ci else ():
        if block is not None and block.low is not None and block.high is not None:
            within = f"({percent(block.confidence, 0)} over {block.n} repeats)"
            lines.append(f"{column.header}: {column.fmt(block.mean)} {interval(block.low, block.high, 1)} {within}")
    return lines


def percentile_key(q: float) -> str:
    """50 -> "p50", 99.9 -> "p99.9"."""
    return f"p{q:g}"


def percentiles(values: Sequence[float], qs: Sequence[float], scale: float = 1.0) -> dict[str, float | None]:
    """numpy's linear-interpolation percentiles of ``values * scale`` (None when there are no values)."""
    data = np.asarray(values, dtype=float) * scale
    if data.size == 0:
        return {percentile_key(q): None for q in qs}
    return {percentile_key(q): float(v) for q, v in zip(qs, np.percentile(data, list(qs)))}


def _with_percentiles(block: Distribution | None, values: Sequence[float], qs: Sequence[float], scale: float) -> None:
    if block is not None:
        block.percentiles = percentiles(values, qs, scale)


def add_percentiles(result: LevelResult, records: Sequence[RequestRecord], qs: Sequence[float]) -> None:
    """Fill ``percentiles`` of the level's latency distributions with the asked percentiles."""
    ok = [r for r in records if r.ok]
    ttfts = [v for v in map(ttft, ok) if v is not None]
    tpots = [v for v in map(tpot, ok) if v is not None]
    e2els = [v for v in map(e2el, ok) if v is not None]
    per_user_e2el = [r.output_tokens / lat for r in ok if r.output_tokens and (lat := e2el(r)) is not None and lat > 0]
    gaps = [g for r in ok for g in chunk_gaps(r)]
    _with_percentiles(result.ttft_ms, ttfts, qs, 1000.0)
    _with_percentiles(result.tpot_ms, tpots, qs, 1000.0)
    _with_percentiles(result.e2el_s, e2els, qs, 1.0)
    _with_percentiles(result.per_user_tok_s, [1.0 / t for t in tpots if t > 0], qs, 1.0)
    _with_percentiles(result.per_user_tok_s_e2el, per_user_e2el, qs, 1.0)
    _with_percentiles(result.itl_ms, gaps, qs, 1000.0)


def per_user_mean(records: Sequence[RequestRecord]) -> float | None:
    """Mean of 1 / TPOT over successful records (as the level's per_user_tok_s.mean)."""
    values = [1.0 / t for r in records if r.ok and (t := tpot(r)) is not None and t > 0]
    return float(np.mean(values)) if values else None


def add_repeat_intervals(result: LevelResult, records: Sequence[RequestRecord], confidence: float) -> None:
    """Per-repeat per-user tok/s, and Student t intervals over repeats when there are at least two."""
    for row in result.repeat_results:
        row.per_user_tok_s_mean = per_user_mean([r for r in records if r.repeat == row.repeat])
    if len(result.repeat_results) < 2:
        return
    result.intervals = RepeatIntervals(
        output_tok_s=mean_interval([row.output_tok_s for row in result.repeat_results], confidence),
        per_user_tok_s=mean_interval([row.per_user_tok_s_mean for row in result.repeat_results], confidence),
    )


def apply_analyses(result: LevelResult, records: Sequence[RequestRecord], analyses: Settings) -> None:
    """Every optional analysis the run asked for (--percentiles, --slo, --confidence), in place."""
    add_repeat_intervals(result, records, analyses.confidence)
    if analyses.percentiles:
        add_percentiles(result, records, analyses.percentiles)
    if analyses.slo:
        result.goodput = goodput_mod.goodput(records, result.duration_s, analyses.slo)


# -- open loop -----------------------------------------------------------------------------------


def max_in_flight(records: Sequence[RequestRecord]) -> int:
    """Most requests holding a concurrency slot at once: admitted_time .. done_time (ends before starts
    at equal times, since a slot is released before the next request takes it)."""
    events: list[tuple[float, int]] = []
    for r in records:
        if r.admitted_time is not None and r.done_time:
            events.append((r.admitted_time, 1))
            events.append((r.done_time, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    current = peak = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def achieved_rate(records: Sequence[RequestRecord], windows: Sequence[Window]) -> float | None:
    """Conversation starts per second: (n - 1) / span of first-turn dispatch times, per repeat, averaged."""
    rates = []
    for window in windows:
        starts = sorted(
            r.dispatch_time for r in records if r.repeat == window.repeat and r.turn == 1 and r.dispatch_time
        )
        if len(starts) >= 2 and starts[-1] > starts[0]:
            rates.append((len(starts) - 1) / (starts[-1] - starts[0]))
    return float(np.mean(rates)) if rates else None


def open_loop_level(
    records: Sequence[RequestRecord],
    windows: Sequence[Window],
    rate: float,
    arrival: str,
    burstiness: float,
    max_concurrency: int | None,
) -> OpenLoopLevel:
    """The open-loop block of a level: arrivals achieved and the local delays before each send."""
    scheduled = [r for r in records if r.scheduled_time is not None and r.dispatch_time is not None]
    admitted = [r for r in scheduled if r.admitted_time is not None]
    sent = [r for r in admitted if r.send_time and r.ready_time]
    return OpenLoopLevel(
        request_rate=None if math.isinf(rate) else rate,
        arrival=arrival,  # type: ignore[arg-type]
        burstiness=burstiness,
        max_concurrency=max_concurrency,
        sessions_started=sum(1 for r in scheduled if r.turn == 1),
        achieved_rate=None if math.isinf(rate) else achieved_rate(records, windows),
        max_in_flight=max_in_flight(records),
        schedule_lag_ms=summarize([r.dispatch_time - r.scheduled_time for r in scheduled], 1000.0),  # type: ignore[operator]
        cap_wait_ms=summarize([r.admitted_time - r.dispatch_time for r in admitted], 1000.0),  # type: ignore[operator]
        queue_delay_ms=summarize([r.send_time - r.scheduled_time for r in sent], 1000.0),  # type: ignore[operator]
    )
