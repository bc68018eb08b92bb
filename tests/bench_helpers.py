"""Shared by the benchmark tests (imported by them; not a test file): the entry points as a user runs them
and the synthetic server's view of what it did."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from in_process import run_verb
from kimi_dflash.bench.response import Reply, StreamAccumulator

REPO = Path(__file__).resolve().parents[1]
BENCH_SCRIPT = REPO / "payload" / "benchmark_multi_turn.py"
COMPARE_SCRIPT = REPO / "payload" / "compare_results.py"
EXAMPLE_RESULT = REPO / "docs" / "benchmark-result.example.json"


def run_benchmark(
    *args: str, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python payload/benchmark_multi_turn.py ARGS`` in a subprocess; stdout and stderr captured."""
    return subprocess.run(
        [sys.executable, str(BENCH_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
        check=False,
    )


def bench_in_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """What ``run_benchmark`` returns, with the benchmark run in this process (in_process.py): for every test whose
    claim is not the process boundary."""
    environ = None if env is None else {**os.environ, **env}
    return run_verb("kimi_dflash.bench.cli", args, argv0=str(BENCH_SCRIPT), prog=BENCH_SCRIPT.name, env=environ)


def compare_in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """What ``run_compare`` returns, with the comparison run in this process."""
    return run_verb("kimi_dflash.bench.compare", args, argv0=str(COMPARE_SCRIPT))


def run_compare(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python payload/compare_results.py ARGS`` in a subprocess."""
    return subprocess.run(
        [sys.executable, str(COMPARE_SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def synthetic_log(url: str) -> list[dict[str, Any]]:
    """What the synthetic server really did per finished request, ordered by arrival."""
    with urllib.request.urlopen(f"{url}/stats/requests", timeout=10) as response:
        return sorted(json.loads(response.read()), key=lambda e: e["received_at"])


def synthetic_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/stats", timeout=5) as response:
        return json.loads(response.read())


def interpret_stream(reads: list[tuple[float, bytes]]) -> Reply:
    """Decode a whole SSE body from its ``(arrival_time, bytes)`` reads, as the client feeds them."""
    accumulator = StreamAccumulator()
    for arrival, data in reads:
        accumulator.feed(arrival, data)
    return accumulator.finish()


def ks_exponential(gaps: np.ndarray | list[float], rate: float) -> float:
    """Kolmogorov-Smirnov statistic D of ``gaps`` against Exponential(rate) (fully specified, no fit; scipy is not in
    the venv)."""
    x = np.sort(np.asarray(gaps, dtype=float))
    n = x.size
    if n == 0:
        return math.nan
    cdf = 1.0 - np.exp(-rate * x)
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - cdf), np.max(cdf - (i - 1) / n)))


def ks_critical(n: int, alpha: float = 0.05) -> float:
    """Asymptotic critical value of D for a fully specified distribution: sqrt(-ln(alpha/2) / 2) / sqrt(n)
    (1.358 / sqrt(n) at alpha 0.05); with Stephens' small-sample correction sqrt(n) + 0.12 + 0.11/sqrt(n)."""
    c = math.sqrt(-math.log(alpha / 2) / 2)
    root = math.sqrt(n)
    return c / (root + 0.12 + 0.11 / root)
