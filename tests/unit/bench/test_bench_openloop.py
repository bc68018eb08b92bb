"""Open-loop load: the arrival processes (pure) and the client against the synthetic server's truth.

Goodness of fit: a one-sample Kolmogorov-Smirnov test of the inter-arrival times against the exponential
distribution with the asked rate (fully specified, nothing fitted), hand-written (``bench_helpers.ks_exponential``;
scipy is not in the venv) with the asymptotic critical value at alpha = 0.05 and Stephens' small-sample
correction. The arrival times tested are the synthetic server's own receipt times of each request.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from bench_helpers import bench_in_process, ks_critical, ks_exponential, run_benchmark, synthetic_log, synthetic_stats
from kimi_dflash.bench import arrivals
from kimi_dflash.bench.metrics import max_in_flight
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.result import load_result
from repo_paths import REPO_ROOT
from synthetic_server import running

FAST_SERVER = ["--ttft-ms", "5", "--chunk-interval-ms", "5"]


def test_poisson_gaps_pass_ks_and_constant_gaps_fail_it() -> None:
    rng = np.random.default_rng(7)
    rate, n = 40.0, 4000
    gaps = arrivals.ArrivalProcess(rate, "poisson").gaps(n, rng)
    assert ks_exponential(gaps, rate) < ks_critical(n)
    assert abs(gaps.mean() * rate - 1) < 4 / math.sqrt(n)  # mean 1/R within 4 sigma
    constant = arrivals.ArrivalProcess(rate, "constant").gaps(n, rng)
    assert np.allclose(constant, 1 / rate)
    assert ks_exponential(constant, rate) > ks_critical(n)  # the test can fail


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_keep_the_rate_and_have_cv_one_over_sqrt_b(burstiness: float) -> None:
    gaps = arrivals.ArrivalProcess(10.0, "gamma", burstiness).gaps(200_000, np.random.default_rng(1))
    assert abs(gaps.mean() - 0.1) < 0.002
    assert abs(gaps.std() / gaps.mean() - 1 / math.sqrt(burstiness)) < 0.03


def test_offsets_start_at_zero_and_infinite_rate_sends_all_at_once() -> None:
    rng = np.random.default_rng(0)
    offsets = arrivals.ArrivalProcess(5.0, "constant").offsets(4, rng)
    assert list(offsets) == pytest.approx([0.0, 0.2, 0.4, 0.6])
    assert list(arrivals.ArrivalProcess(math.inf).offsets(3, rng)) == [0.0, 0.0, 0.0]


def test_same_seed_same_schedule() -> None:
    process = arrivals.ArrivalProcess(3.0, "gamma", 0.5)
    a = process.offsets(50, arrivals.level_rng(4, 3.0, 0, 0))
    b = process.offsets(50, arrivals.level_rng(4, 3.0, 0, 0))
    c = process.offsets(50, arrivals.level_rng(5, 3.0, 0, 0))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_think_time_distributions_have_the_asked_mean() -> None:
    rng = np.random.default_rng(3)
    assert arrivals.ThinkTime(0.5, "fixed").draw(rng) == 0.5
    for dist in ("exp", "uniform"):
        draws = [arrivals.ThinkTime(0.5, dist).draw(rng) for _ in range(20_000)]
        assert abs(np.mean(draws) - 0.5) < 0.02 and min(draws) >= 0


@pytest.mark.parametrize("text", ["0", "-1", "x", "1,,nan", "", "1e400"])
def test_bad_rates_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        arrivals.parse_rates(text)


def test_parse_rates_sweeps_and_inf() -> None:
    assert arrivals.parse_rates("1,2,4,2") == (1.0, 2.0, 4.0)
    assert arrivals.parse_rates("inf") == (math.inf,)


def test_max_in_flight_counts_overlaps() -> None:
    def rec(a: float, d: float) -> RequestRecord:
        return RequestRecord(sessions=1, repeat=0, session=0, turn=1, admitted_time=a, done_time=d)

    assert max_in_flight([rec(0, 2), rec(1, 3), rec(2, 4), rec(2.5, 5)]) == 3  # 2.0: one ends as one starts


@pytest.mark.realtime
def test_constant_arrivals_hit_the_asked_rate_within_five_percent(tmp_path: Path) -> None:
    rate, n = 50.0, 150
    out = tmp_path / "constant.json"
    with running(FAST_SERVER) as url:
        proc = run_benchmark(
            "--base-url", url, "--request-rate", str(rate), "--arrival", "constant", "--num-sessions", str(n),
            "--turns-per-session", "1", "--max-tokens", "2", "--warmup", "0", "--output", str(out), timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        received = np.array([e["received_at"] for e in synthetic_log(url)])
    assert abs((n - 1) / (received[-1] - received[0]) / rate - 1) < 0.05
    assert np.median(np.diff(received)) == pytest.approx(1 / rate, rel=0.05)


def test_in_flight_never_exceeds_the_cap_and_think_time_is_kept(tmp_path: Path) -> None:
    cap, n, think = 4, 24, 0.1
    out = tmp_path / "cap.json"
    with running(["--ttft-ms", "20", "--chunk-interval-ms", "10"]) as url:
        proc = bench_in_process(
            "--base-url",
            url,
            "--request-rate",
            "inf",
            "--num-sessions",
            str(n),
            "--max-concurrency",
            str(cap),
            "--turns-per-session",
            "2",
            "--max-tokens",
            "4",
            "--think-time",
            str(think),
            "--warmup",
            "0",
            "--output",
            str(out),
            "--record-requests",
        )
        assert proc.returncode == 0, proc.stderr
        stats = synthetic_stats(url)
    assert stats["streams_active_max"] == cap  # the server never saw more than the cap (and the cap was reached)
    level = load_result(out).results[0]
    assert level.completed == 2 * n and level.open_loop is not None
    assert level.open_loop.max_in_flight == cap
    assert level.open_loop.cap_wait_ms.max > 0 and level.open_loop.queue_delay_ms.p99 > 0
    assert level.request_records is not None
    by_session: dict[int, dict[int, RequestRecord]] = {}
    for r in level.request_records.records:
        by_session.setdefault(r.session, {})[r.turn] = r
    for turns in by_session.values():
        # turn 2 was scheduled exactly a think time after turn 1 finished, and never sent before that
        assert turns[2].scheduled_time == pytest.approx(turns[1].done_time + think, abs=2e-6)
        assert turns[2].send_time >= turns[2].scheduled_time


def test_open_loop_flags_without_a_rate_are_refused() -> None:
    proc = bench_in_process("--max-concurrency", "4", "--base-url", "http://127.0.0.1:9")
    assert proc.returncode == 2 and "--request-rate" in proc.stderr and "Traceback" not in proc.stderr
    proc = bench_in_process("--sessions", "4", "--request-rate", "2", "--base-url", "http://127.0.0.1:9")
    assert proc.returncode == 2 and "exclude each other" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arrival", "gamma", "--burstiness", "inf"], "--burstiness must be a finite number"),
        (["--think-time", "inf"], "--think-time must be a finite number"),
        (["--think-time", "nan"], "--think-time must be a finite number"),
        (["--request-rate", "1e-9"], "more than the 24 h a run may plan"),  # 100 conversations 3 years apart
        (["--think-time", "1e300"], "more than the 24 h a run may plan"),
        (["--num-sessions", "100001", "--repeats", "2"], "more than the 24 h a run may plan"),
    ],
)
def test_waits_that_cannot_finish_are_refused_when_parsed(args: list[str], message: str) -> None:
    """A non-finite or endless wait is refused with exit 2 before anything runs (it used to crash at the first
    checkpoint, or run for years with a wrong ETA)."""
    rate = [] if "--request-rate" in args else ["--request-rate", "1"]
    proc = bench_in_process(*rate, *args, "--base-url", "http://127.0.0.1:9")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot reach the server" not in proc.stderr  # refused before any connection


def test_a_plan_within_the_cap_is_accepted() -> None:
    from kimi_dflash.bench import cli as bench_cli
    from kimi_dflash.core import options

    settings = options.build_parser(bench_cli).parse_args(  # parsing runs Settings.check: 17 min, no error
        ["--request-rate", "0.01,inf", "--num-sessions", "10", "--think-time", "60", "--turns-per-session", "3"]
    )
    assert settings.planned_waits_s() == pytest.approx(9 / 0.01 + 2 * 60 + 2 * 60)


def test_open_loop_replays_conversation_datasets_like_the_closed_loop(tmp_path: Path) -> None:
    """Both loops share one conversation loop: a conversation dataset's turn 1 starts a fresh history, and every
    record keeps its prompt's category and id (the open loop used to lose both)."""
    out = tmp_path / "speed.json"
    dataset = REPO_ROOT / "tests" / "data" / "speed-bench.jsonl"  # conversations of 1, 2, 3, 1 user turns
    with running(FAST_SERVER) as url:
        proc = bench_in_process(
            "--base-url",
            url,
            "--request-rate",
            "inf",
            "--num-sessions",
            "4",
            "--turns-per-session",
            "3",
            "--dataset",
            str(dataset),
            "--max-tokens",
            "4",
            "--warmup",
            "0",
            "--output",
            str(out),
            "--record-requests",
        )
    assert proc.returncode == 0, proc.stderr
    level = load_result(out).results[0]
    assert level.request_records is not None and level.completed == 12
    records = level.request_records.records
    assert {r.category for r in records} <= {"code", "math", "writing"} and all(r.prompt_id for r in records)
    restarts = [r for r in records if r.turn == 1]
    assert len(restarts) > 4  # a session that finished a short conversation started the next one at turn 1
    for r in restarts:  # a fresh history: no earlier reply carried into the prompt
        assert r.prompt_tokens is not None and r.prompt_tokens < 40
