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

from bench_helpers import ks_critical, ks_exponential, run_benchmark, synthetic_log
from kimi_dflash.bench.result import load_result
from synthetic_server import running

pytestmark = pytest.mark.realtime

FAST_SERVER = ["--ttft-ms", "5", "--chunk-interval-ms", "5"]


def test_poisson_arrivals_at_the_server_fit_and_hit_the_rate(tmp_path: Path) -> None:
    # 20/s: a mean gap of 50 ms, so the few-ms scheduling jitter of a loaded shared box barely moves the
    # gap distribution (at 40/s and load average 11 on 2 cores the KS test failed 1 run in 6)
    rate, n = 20.0, 300
    out = tmp_path / "poisson.json"
    with running(FAST_SERVER) as url:
        proc = run_benchmark(
            "--base-url", url, "--request-rate", str(rate), "--num-sessions", str(n), "--turns-per-session", "1",
            "--max-tokens", "2", "--warmup", "0", "--output", str(out), "--record-requests", "--seed", "11",
            timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        log = synthetic_log(url)
    received = np.array([e["received_at"] for e in log])
    assert received.size == n
    gaps = np.diff(received)
    d = ks_exponential(gaps, rate)
    assert d < ks_critical(gaps.size), f"KS D = {d:.4f}"
    level = load_result(out).results[0]
    assert level.open_loop is not None and level.request_records is not None
    # The client follows its seeded schedule: the server's achieved rate equals the schedule's own
    # rate within 1 %, and the schedule's rate is within 3 sigma of the asked rate (a Poisson sample of
    # 300 arrivals has a relative spread of 1/sqrt(300) = 5.8 %: asserting 5 % on a random sample would
    # test the seed; with the constant process the 5 % check is exact, below).
    origin = level.request_records.clock_origin
    scheduled = np.sort([r.scheduled_time + origin for r in level.request_records.records])
    schedule_rate = (n - 1) / (scheduled[-1] - scheduled[0])
    server_rate = (n - 1) / (received[-1] - received[0])
    assert abs(server_rate / schedule_rate - 1) < 0.01
    assert abs(schedule_rate / rate - 1) < 3 / math.sqrt(n)
    assert level.open_loop.achieved_rate == pytest.approx(server_rate, rel=0.01)
    assert level.open_loop.schedule_lag_ms.min >= 0  # never sent early
