"""Metrics as pure functions of request records (definitions: docs/benchmark.md).

Per request (streaming):
  TTFT  = first token-bearing chunk - send
  E2EL  = last token-bearing chunk - send
  N     = usage.completion_tokens (token-bearing chunk count only when the server sent no usage: flagged)
  TPOT  = (E2EL - TTFT) / (N - 1), defined for N >= 2
  per-user tok/s = 1 / TPOT (decode speed a user sees) and, separately labelled, N / E2EL
Per level:
  output tok/s = sum N over successful requests / wall time of the measured window
  request throughput = successful requests / the same window
Percentiles use numpy's default (linear interpolation), as ``vllm bench serve`` does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from kimi_dflash.bench.records import CANCELLED, TOKENS_FROM_CHUNKS, RequestRecord
from kimi_dflash.bench.result import (
    ClientUsage,
    Distribution,
    LevelResult,
    RepeatResult,
    SpecDecode,
    SpecDecodeStatus,
    TurnResult,
)

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class Window:
    """One repeat's measured window, timed by the runner around that repeat's sessions."""

    repeat: int
    duration_s: float
    start_s: float = 0.0  # from the run's clock origin


@dataclass(frozen=True)
class Latencies:
    """The per-request latency distributions of a set of records (successful ones only)."""

    ttft_ms: Distribution
    tpot_ms: Distribution
    e2el_s: Distribution
    per_user_tok_s: Distribution
    per_user_tok_s_e2el: Distribution
    itl_ms: Distribution
    tokens_per_chunk: Distribution


def summarize(values: Sequence[float] | np.ndarray, scale: float = 1.0) -> Distribution:
    """mean / p50 / p90 / p95 / p99 / min / max / std / count of ``values * scale`` (None when empty)."""
    data = np.asarray(values, dtype=float) * scale
    if data.size == 0:
        return Distribution(mean=None, p50=None, p90=None, p95=None, p99=None, min=None, max=None, std=None, count=0)
    p50, p90, p95, p99 = (float(v) for v in np.percentile(data, PERCENTILES))
    return Distribution(
        mean=float(data.mean()),
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
        min=float(data.min()),
        max=float(data.max()),
        std=float(data.std()),
        count=int(data.size),
    )


def ttft(record: RequestRecord) -> float | None:
    if record.first_token_time is None:
        return None
    return record.first_token_time - record.send_time


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


def chunk_gaps(record: RequestRecord) -> list[float]:
    """Gaps between token-bearing chunks (per verify step under speculation, not per token)."""
    times = record.chunk_times
    return [b - a for a, b in pairwise(times)]


def latency_block(records: Sequence[RequestRecord]) -> Latencies:
    """The per-request latency distributions of successful records."""
    ok = [r for r in records if r.ok]
    ttfts = [v for v in map(ttft, ok) if v is not None]
    tpots = [v for v in map(tpot, ok) if v is not None]
    e2els = [v for v in map(e2el, ok) if v is not None]
    per_user_e2el = [r.output_tokens / lat for r in ok if r.output_tokens and (lat := e2el(r)) is not None and lat > 0]
    gaps: list[float] = []
    for r in ok:
        gaps.extend(chunk_gaps(r))
    tokens_per_chunk = [r.output_tokens / r.token_chunks for r in ok if r.token_chunks and r.output_tokens]
    return Latencies(
        ttft_ms=summarize(ttfts, 1000.0),
        tpot_ms=summarize(tpots, 1000.0),
        e2el_s=summarize(e2els),
        per_user_tok_s=summarize([1.0 / t for t in tpots if t > 0]),
        per_user_tok_s_e2el=summarize(per_user_e2el),
        itl_ms=summarize(gaps, 1000.0),
        tokens_per_chunk=summarize(tokens_per_chunk),
    )


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


def level_result(
    sessions: int,
    turns: int,
    records: Sequence[RequestRecord],
    windows: Sequence[Window],
    client_cpu_s: float,
    spec_decode: SpecDecode | None,
    spec_status: SpecDecodeStatus,
    partial: bool,
) -> LevelResult:
    """One concurrency level of the result file, from its records and the windows of its repeats."""
    ok = [r for r in records if r.ok]
    failures, examples = count_failures(records)
    duration = float(sum(w.duration_s for w in windows))
    output_tokens = int(sum(r.output_tokens or 0 for r in ok))
    prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    latencies = latency_block(records)
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
        ttft_ms=latencies.ttft_ms,
        tpot_ms=latencies.tpot_ms,
        e2el_s=latencies.e2el_s,
        per_user_tok_s=latencies.per_user_tok_s,
        per_user_tok_s_e2el=latencies.per_user_tok_s_e2el,
        itl_ms=latencies.itl_ms,
        tokens_per_chunk=latencies.tokens_per_chunk,
        output_tokens_per_request=summarize([r.output_tokens or 0 for r in ok]),
        prompt_tokens_per_request=summarize(prompt_counts),
        client_send_ms=summarize([r.send_time - r.ready_time for r in ok], 1000.0),
        tokens_counted_from_chunks=sum(1 for r in ok if r.tokens_source == TOKENS_FROM_CHUNKS),
        tpot_excluded_short=sum(1 for r in ok if r.output_tokens is not None and r.output_tokens < 2),
        spec_decode=spec_decode,
        spec_decode_status=spec_status,
        client=ClientUsage(cpu_s=client_cpu_s, cpu_util=client_cpu_s / duration if duration > 0 else None),
        per_turn=per_turn(records, turns),
        repeat_results=[repeat_result(w, [r for r in records if r.repeat == w.repeat]) for w in windows],
        partial=partial,
    )


def repeat_result(window: Window, records: Sequence[RequestRecord]) -> RepeatResult:
    ok = [r for r in records if r.ok]
    tokens = int(sum(r.output_tokens or 0 for r in ok))
    duration = float(window.duration_s)
    return RepeatResult(
        repeat=window.repeat,
        duration_s=duration,
        completed=len(ok),
        failed=sum(1 for r in records if r.error is not None and r.error != CANCELLED),
        output_tokens=tokens,
        output_tok_s=tokens / duration if duration > 0 else None,
    )


def per_turn(records: Sequence[RequestRecord], turns: int) -> list[TurnResult]:
    """Breakdown by turn number: later turns carry the conversation so far, so prompts grow."""
    rows = []
    for turn in range(1, turns + 1):
        of_turn = [r for r in records if r.turn == turn]
        ok = [r for r in of_turn if r.ok]
        lat = latency_block(of_turn)
        prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
        rows.append(
            TurnResult(
                turn=turn,
                requests=len(of_turn),
                completed=len(ok),
                failed=sum(1 for r in of_turn if r.error is not None and r.error != CANCELLED),
                prompt_tokens=summarize(prompt_counts),
                output_tokens=int(sum(r.output_tokens or 0 for r in ok)),
                ttft_ms=lat.ttft_ms,
                tpot_ms=lat.tpot_ms,
                e2el_s=lat.e2el_s,
                per_user_tok_s=lat.per_user_tok_s,
            )
        )
    return rows
