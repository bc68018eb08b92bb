"""Uncertainty: intervals over repeats, the speedup's interval, a same-server A/B, the speedup at the SLO."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from bench_helpers import EXAMPLE_RESULT, run_benchmark, run_compare
from kimi_dflash.bench import compare, intervals
from kimi_dflash.bench.result import BenchmarkResult, Goodput, load_result
from synthetic_server import running


def test_t_quantiles() -> None:
    assert intervals.t_quantile(0.95, 2) == pytest.approx(4.303)
    assert intervals.t_quantile(0.95, 2.5) == pytest.approx((4.303 + 3.182) / 2)
    assert intervals.t_quantile(0.95, 1000) == pytest.approx(1.9623, abs=0.002)
    assert intervals.t_quantile(0.99, 40) == pytest.approx(2.704, abs=0.002)


def test_mean_interval_by_hand() -> None:
    ci = intervals.mean_interval([1.0, 2.0, 3.0])
    assert ci is not None and ci.mean == 2.0
    assert ci.high - 2.0 == pytest.approx(4.303 / math.sqrt(3))  # sd 1
    single = intervals.mean_interval([5.0])
    assert single is not None and single.low is None


def test_ratio_interval_significance() -> None:
    same = intervals.ratio_interval([100, 103, 98], [101, 99, 102])
    assert same is not None and same.low < 1 < same.high and same.significant is False
    faster = intervals.ratio_interval([150, 152, 149], [100, 101, 99])
    assert faster is not None and faster.significant is True and faster.low < 1.5 < faster.high
    assert intervals.ratio_interval([150], [100]).significant is None  # type: ignore[union-attr]


@pytest.mark.realtime
def test_same_server_ab_interval_contains_one(tmp_path: Path) -> None:
    """Two runs against one synthetic server: any speedup is noise, so the interval must contain 1.0.
    The compare runs at 99 % so a correct 95 % procedure cannot make this test flaky 1 time in 20."""
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    with running(["--ttft-ms", "20", "--chunk-interval-ms", "5"]) as url:
        for path in paths:
            proc = run_benchmark(
                "--base-url", url, "--sessions", "4", "--turns-per-session", "2", "--max-tokens", "16",
                "--repeats", "4", "--warmup", "1", "--output", str(path), "--label", path.stem,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
    level = load_result(paths[0]).results[0]
    assert level.intervals is not None and level.intervals.output_tok_s is not None
    ci = level.intervals.output_tok_s
    assert ci.n == 4 and ci.low < ci.mean < ci.high
    assert all(r.per_user_tok_s_mean is not None for r in level.repeat_results)
    proc = run_compare(str(paths[0]), str(paths[1]), "--confidence", "0.99")
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 4 |"))
    assert "not significant" in row
    low, high = (float(x) for x in row.split("[")[1].split("]")[0].split(","))
    assert low <= 1.0 <= high


def _with_goodput(doc: BenchmarkResult, attainment: dict[int, float], goodput_tok_s: float) -> BenchmarkResult:
    doc = copy.deepcopy(doc)
    doc.settings.slo = {"ttft_ms": 500.0}
    for level in doc.results:
        level.goodput = Goodput(
            slo={"ttft_ms": 500.0}, requests=10, met=round(10 * attainment[level.sessions]),
            attainment=attainment[level.sessions], request_goodput=1.0, output_goodput=goodput_tok_s * level.sessions,
        )  # fmt: skip
    return doc


def test_speedup_at_the_slo_uses_each_sides_highest_sustained_load() -> None:
    example = load_result(EXAMPLE_RESULT)
    assert sorted(example.levels) == [2, 4]
    base = _with_goodput(example, {2: 0.95, 4: 0.5}, 10.0)  # sustains 2 sessions: 20 tok/s of goodput
    cand = _with_goodput(example, {2: 1.0, 4: 0.92}, 15.0)  # sustains 4 sessions: 60 tok/s
    runs = [compare.Run(Path("b.json"), "base", base), compare.Run(Path("c.json"), "cand", cand)]
    section = compare.slo_section(*runs, threshold=0.9)
    assert "| base | 2 | 95.0 % |" in section and "| cand | 4 | 92.0 % |" in section
    assert "**Speedup at the SLO: 3.00x**" in section
    strict = compare.slo_section(*runs, threshold=0.99)
    assert "none (no level reaches 99 %)" in strict and "Speedup at the SLO: —" in strict
    other = copy.deepcopy(cand)
    other.settings.slo = {"ttft_ms": 200.0}
    assert "Not compared" in compare.slo_section(runs[0], compare.Run(Path("o.json"), "cand", other))
    assert "Speedup at the SLO: 3.00x" in compare.render_markdown(runs)
