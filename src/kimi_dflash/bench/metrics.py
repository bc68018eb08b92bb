"""Metrics as pure functions of request records (definitions: docs/benchmark.md, "Metric definitions")."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from kimi_dflash.bench.intervals import mean_interval
from kimi_dflash.bench.records import CANCELLED, TOKENS_FROM_CHUNKS, RequestRecord
from kimi_dflash.bench.result import (
    ClientUsage,
    Distribution,
    LevelResult,
    OpenLoopLevel,
    RepeatIntervals,
    RepeatResult,
    SpecDecode,
    SpecDecodeStatus,
    TurnResult,
)

if TYPE_CHECKING:
    from kimi_dflash.bench.settings import OpenLoopSettings

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class Window:
    repeat: int
    duration_s: float
    cpu_s: float = 0.0  # the client's CPU time over the window


def percentile_key(q: float) -> str:
    """50 -> "p50", 99.9 -> "p99.9"."""
    return f"p{q:g}"


def summarize(values: Sequence[float] | np.ndarray, scale: float = 1.0, asked: Sequence[float] = ()) -> Distribution:
    """The Distribution of ``values * scale`` (None when empty), with the ``asked`` --percentiles."""
    data = np.asarray(values, dtype=float) * scale
    qs = (*PERCENTILES, 0, 100, *asked)  # min and max are the percentiles 0 and 100
    found = [float(v) for v in np.percentile(data, qs)] if data.size else [None] * len(qs)
    fixed = dict(zip(("p50", "p90", "p95", "p99", "min", "max"), found))
    extra = {percentile_key(q): v for q, v in zip(asked, found[len(fixed) :])} if asked else None
    mean, std = (float(data.mean()), float(data.std())) if data.size else (None, None)
    return Distribution(mean=mean, **fixed, std=std, count=int(data.size), percentiles=extra)


def ttft(record: RequestRecord) -> float | None:
    return None if record.first_token_time is None else record.first_token_time - record.send_time


def e2el(record: RequestRecord) -> float | None:
    """Streaming: to the last token-bearing chunk. Non-streaming: to the end of the response body."""
    if record.last_token_time is not None:
        return record.last_token_time - record.send_time
    if record.ok and record.done_time:
        return record.done_time - record.send_time
    return None


def tpot(record: RequestRecord) -> float | None:
    first, latency, n = ttft(record), e2el(record), record.output_tokens
    if first is None or latency is None or n is None or n < 2:
        return None
    return (latency - first) / (n - 1)


def latencies(records: Sequence[RequestRecord], asked: Sequence[float] = ()) -> dict[str, Distribution]:
    """The per-request latency distributions of the successful records, by their LevelResult names."""
    ok = [r for r in records if r.ok]
    tpots = [v for v in map(tpot, ok) if v is not None]
    e2els = [v for v in map(e2el, ok) if v is not None]
    return {
        "ttft_ms": summarize([v for v in map(ttft, ok) if v is not None], 1000.0, asked),
        "tpot_ms": summarize(tpots, 1000.0, asked),
        "e2el_s": summarize(e2els, 1.0, asked),
        "per_user_tok_s": summarize([1.0 / t for t in tpots if t > 0], 1.0, asked),
        "per_user_tok_s_e2el": summarize(
            [r.output_tokens / lat for r in ok if r.output_tokens and (lat := e2el(r)) is not None and lat > 0],
            1.0,
            asked,
        ),
        # gaps between token-bearing chunks: per verify step under speculation, not per token
        "itl_ms": summarize([b - a for r in ok for a, b in pairwise(r.chunk_times)], 1000.0, asked),
        "tokens_per_chunk": summarize(
            [r.output_tokens / r.token_chunks for r in ok if r.token_chunks and r.output_tokens]
        ),
    }


def count_failures(records: Iterable[RequestRecord]) -> tuple[dict[str, int], dict[str, str]]:
    """Failures by reason (cancelled excluded) and the first detail seen for each reason."""
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for r in records:
        if r.error is None or r.error == CANCELLED:
            continue
        counts[r.error] += 1
        examples.setdefault(r.error, r.error_detail)
    return dict(sorted(counts.items())), examples


def _failed(records: Iterable[RequestRecord]) -> int:
    return sum(1 for r in records if r.error is not None and r.error != CANCELLED)


def _tokens(records: Iterable[RequestRecord]) -> int:
    return int(sum(r.output_tokens or 0 for r in records if r.ok))


def level_result(
    sessions: int,
    turns: int,
    records: Sequence[RequestRecord],
    windows: Sequence[Window],
    spec_decode: SpecDecode | None,
    spec_status: SpecDecodeStatus,
    partial: bool,
    percentiles: Sequence[float] = (),
) -> LevelResult:
    """One concurrency level of the result file, from its records and the windows of its repeats."""
    ok = [r for r in records if r.ok]
    failures, examples = count_failures(records)
    duration = float(sum(w.duration_s for w in windows))
    cpu_s = float(sum(w.cpu_s for w in windows))
    output_tokens = _tokens(ok)
    prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    return LevelResult(
        sessions=sessions,
        turns_per_session=turns,
        repeats=len(windows),
        requests=len(records),
        completed=len(ok),
        failed=sum(failures.values()),
        cancelled=sum(1 for r in records if r.error == CANCELLED),
        failures=failures,
        failure_examples=examples,
        output_tokens=output_tokens,
        input_tokens=int(sum(prompt_counts)) if prompt_counts else None,
        duration_s=duration,
        output_tok_s=output_tokens / duration if duration > 0 else None,
        request_throughput=len(ok) / duration if duration > 0 else None,
        **latencies(records, percentiles),
        output_tokens_per_request=summarize([r.output_tokens or 0 for r in ok]),
        prompt_tokens_per_request=summarize(prompt_counts),
        client_send_ms=summarize([r.send_time - r.ready_time for r in ok], 1000.0),
        tokens_counted_from_chunks=sum(1 for r in ok if r.tokens_source == TOKENS_FROM_CHUNKS),
        tpot_excluded_short=sum(1 for r in ok if r.output_tokens is not None and r.output_tokens < 2),
        spec_decode=spec_decode,
        spec_decode_status=spec_status,
        client=ClientUsage(cpu_s=cpu_s, cpu_util=cpu_s / duration if duration > 0 else None),
        per_turn=[turn_result(turn, [r for r in records if r.turn == turn]) for turn in range(1, turns + 1)],
        repeat_results=[repeat_result(w, [r for r in records if r.repeat == w.repeat]) for w in windows],
        partial=partial,
    )


def repeat_result(window: Window, records: Sequence[RequestRecord]) -> RepeatResult:
    tokens, duration = _tokens(records), float(window.duration_s)
    return RepeatResult(
        repeat=window.repeat,
        duration_s=duration,
        completed=sum(1 for r in records if r.ok),
        failed=_failed(records),
        output_tokens=tokens,
        output_tok_s=tokens / duration if duration > 0 else None,
        per_user_tok_s_mean=summarize([1.0 / t for r in records if r.ok and (t := tpot(r)) is not None and t > 0]).mean,
    )


def turn_result(turn: int, records: Sequence[RequestRecord]) -> TurnResult:
    ok = [r for r in records if r.ok]
    lat = latencies(records)
    return TurnResult(
        turn=turn,
        requests=len(records),
        completed=len(ok),
        failed=_failed(records),
        prompt_tokens=summarize([r.prompt_tokens for r in ok if r.prompt_tokens is not None]),
        output_tokens=_tokens(ok),
        **{key: lat[key] for key in ("ttft_ms", "tpot_ms", "e2el_s", "per_user_tok_s")},
    )


def repeat_intervals(rows: Sequence[RepeatResult], confidence: float) -> RepeatIntervals | None:
    """Student t intervals over the repeats (None with fewer than two)."""
    if len(rows) < 2:
        return None
    return RepeatIntervals(
        output_tok_s=mean_interval([row.output_tok_s for row in rows], confidence),
        per_user_tok_s=mean_interval([row.per_user_tok_s_mean for row in rows], confidence),
    )


# -- open loop -----------------------------------------------------------------------------------


def max_in_flight(records: Sequence[RequestRecord]) -> int:
    """Most requests holding a concurrency slot at once (at equal times a slot is released before it is taken)."""
    events: list[tuple[float, int]] = []
    for r in records:
        if r.admitted_time is not None and r.done_time:
            events += [(r.admitted_time, 1), (r.done_time, -1)]
    current = peak = 0
    for _, step in sorted(events):
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
    records: Sequence[RequestRecord], windows: Sequence[Window], rate: float, ol: OpenLoopSettings
) -> OpenLoopLevel:
    scheduled = [r for r in records if r.scheduled_time is not None and r.dispatch_time is not None]
    admitted = [r for r in scheduled if r.admitted_time is not None]
    sent = [r for r in admitted if r.send_time and r.ready_time]
    return OpenLoopLevel(
        request_rate=None if math.isinf(rate) else rate,
        arrival=ol.arrival,
        burstiness=ol.burstiness,
        max_concurrency=ol.max_concurrency,
        sessions_started=sum(1 for r in scheduled if r.turn == 1),
        achieved_rate=None if math.isinf(rate) else achieved_rate(records, windows),
        max_in_flight=max_in_flight(records),
        schedule_lag_ms=summarize([r.dispatch_time - r.scheduled_time for r in scheduled], 1000.0),  # type: ignore[operator]
        cap_wait_ms=summarize([r.admitted_time - r.dispatch_time for r in admitted], 1000.0),  # type: ignore[operator]
        queue_delay_ms=summarize([r.send_time - r.scheduled_time for r in sent], 1000.0),  # type: ignore[operator]
    )
