"""Metric definitions as pure functions over hand-built records, checked against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kimi_dflash.bench import metrics
from kimi_dflash.bench.records import CANCELLED, TIMEOUT, TOKENS_FROM_CHUNKS, TOKENS_FROM_USAGE, RequestRecord


def rec(
    send: float,
    first: float | None,
    last: float | None,
    n: int | None,
    *,
    turn: int = 1,
    chunks: list[float] | None = None,
    error: str | None = None,
    source: str = TOKENS_FROM_USAGE,
    prompt: int | None = 10,
    repeat: int = 0,
) -> RequestRecord:
    r = RequestRecord(sessions=2, repeat=repeat, session=0, turn=turn)
    r.send_time, r.first_token_time, r.last_token_time = send, first, last
    r.done_time = (last or send) + 0.001
    r.output_tokens, r.tokens_source, r.prompt_tokens = n, source, prompt
    r.chunk_times = chunks if chunks is not None else ([first, last] if first is not None and last is not None else [])
    r.token_chunks = len(r.chunk_times)
    r.error = error
    return r


def test_per_request_definitions() -> None:
    r = rec(10.0, 10.2, 11.2, 11)  # TTFT 0.2 s, E2EL 1.2 s, 11 tokens
    assert metrics.ttft(r) == pytest.approx(0.2)
    assert metrics.e2el(r) == pytest.approx(1.2)
    assert metrics.tpot(r) == pytest.approx(0.1)  # (1.2 - 0.2) / (11 - 1)


def test_tpot_undefined_for_one_token() -> None:
    assert metrics.tpot(rec(0.0, 0.5, 0.5, 1)) is None
    assert metrics.tpot(rec(0.0, 0.5, 0.5, 0)) is None


def test_non_stream_e2el_uses_end_of_body() -> None:
    r = rec(1.0, None, None, 5)
    r.done_time = 3.0
    assert metrics.ttft(r) is None and metrics.tpot(r) is None
    assert metrics.e2el(r) == pytest.approx(2.0)


def test_summary_matches_numpy_linear_percentiles() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    s = metrics.summarize(values, 1000.0)
    arr = np.array(values) * 1000
    assert s.mean == pytest.approx(arr.mean())
    for p in (50, 90, 95, 99):
        assert getattr(s, f"p{p}") == pytest.approx(np.percentile(arr, p))
    assert (s.min, s.max, s.count) == (1000.0, 10000.0, 6)
    empty = metrics.summarize([])
    assert empty.count == 0 and empty.mean is None and empty.p99 is None


def test_level_result_aggregates_and_flags() -> None:
    records = [
        rec(0.0, 0.1, 1.1, 11, turn=1, chunks=[0.1, 0.6, 1.1]),  # tpot 0.1, 3 chunks -> 11/3 tokens per chunk
        rec(0.0, 0.3, 2.3, 21, turn=2, chunks=[0.3, 2.3]),  # tpot 0.1
        rec(0.0, 0.2, 0.2, 1, turn=2),  # N = 1: no TPOT
        rec(0.0, 0.1, 0.5, 4, turn=1, source=TOKENS_FROM_CHUNKS, prompt=None),  # no usage: flagged
        rec(0.0, None, None, None, error=TIMEOUT),
        rec(0.0, None, None, None, error="http_429"),
        rec(0.0, None, None, None, error="http_429"),
        rec(0.0, None, None, None, error=CANCELLED),
    ]
    windows = [metrics.Window(repeat=0, duration_s=4.0, cpu_s=0.5)]
    out = metrics.level_result(2, 2, records, windows, spec_decode=None, spec_status="absent", partial=False)
    assert out.completed == 4
    assert out.failed == 3 and out.cancelled == 1
    assert out.failures == {"http_429": 2, "timeout": 1}
    assert out.output_tokens == 11 + 21 + 1 + 4
    assert out.output_tok_s == pytest.approx(37 / 4.0)
    assert out.request_throughput == pytest.approx(1.0)
    assert out.tpot_ms.count == 3  # records 1, 2 and the 4-token one; N=1 excluded
    assert out.tpot_excluded_short == 1
    assert out.tokens_counted_from_chunks == 1
    assert out.ttft_ms.mean == pytest.approx(1000 * (0.1 + 0.3 + 0.2 + 0.1) / 4)
    assert out.input_tokens == 30
    assert out.client is not None and out.client.cpu_util == pytest.approx(0.125)
    # per-user speed: 1/TPOT per request, and separately N/E2EL
    tpots = [0.1, 0.1, (0.5 - 0.1) / 3]
    assert out.per_user_tok_s.mean == pytest.approx(np.mean([1 / t for t in tpots]))
    assert out.per_user_tok_s_e2el is not None
    assert out.per_user_tok_s_e2el.mean == pytest.approx(np.mean([11 / 1.1, 21 / 2.3, 1 / 0.2, 4 / 0.5]))
    # chunk gaps are per chunk, not per token
    assert out.itl_ms is not None and out.itl_ms.count == 2 + 1 + 1 + 1
    assert out.tokens_per_chunk is not None and out.tokens_per_chunk.max == pytest.approx(21 / 2)
    turn2 = out.per_turn[1]
    assert (turn2.turn, turn2.completed, turn2.output_tokens) == (2, 2, 22)


def test_repeats_are_pooled_by_total_time() -> None:
    records = [rec(0, 0.1, 1.0, 10, repeat=0), rec(0, 0.1, 1.0, 30, repeat=1)]
    windows = [metrics.Window(repeat=0, duration_s=1.0), metrics.Window(repeat=1, duration_s=3.0)]
    out = metrics.level_result(1, 1, records, windows, None, "absent", False)
    assert out.duration_s == 4.0 and out.output_tok_s == pytest.approx(10.0)
    assert [r.output_tok_s for r in out.repeat_results] == [10.0, 10.0]


def test_no_nan_or_inf_for_empty_levels() -> None:
    out = metrics.level_result(4, 3, [], [metrics.Window(repeat=0, duration_s=0.0)], None, "absent", True)
    assert out.client is not None
    flat = [out.output_tok_s, out.request_throughput, out.client.cpu_util]
    assert all(v is None or math.isfinite(v) for v in flat)
