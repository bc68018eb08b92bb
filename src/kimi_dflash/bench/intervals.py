"""Confidence intervals over repeats, and of a speedup between two runs (formulas: docs/benchmark.md). The repeat is
the unit: requests of one window share the server's batch, so an interval over requests would be far too narrow."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kimi_dflash.bench.fields import doc

T_METHOD = "student-t over repeats"


@dataclass(kw_only=True)
class Interval:
    """A two-sided confidence interval of a mean over repeats (Student t, see bench/intervals.py)."""

    mean: float = doc("mean of the per-repeat values")
    low: float | None = doc("lower bound; null with fewer than 2 repeats")
    high: float | None = doc("upper bound; null with fewer than 2 repeats")
    confidence: float = doc("confidence level, e.g. 0.95")
    n: int = doc("repeats the interval is computed from")
    method: str = doc("how it was computed")


# Two-sided Student t quantiles t(1 - α/2, df) for df 1..30 at the confidence levels offered.
_T_TABLE = {
    0.90: (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
           1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697),
    0.95: (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
           2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042),
    0.99: (63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012, 2.977, 2.947,
           2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750),
}  # fmt: skip
_Z = {0.90: 1.6449, 0.95: 1.9600, 0.99: 2.5758}
CONFIDENCE_LEVELS = tuple(_T_TABLE)


def t_quantile(confidence: float, df: float) -> float:
    """t(1 - α/2, df) for confidence 0.90 / 0.95 / 0.99; fractional df interpolate, df > 30 use a
    Cornish-Fisher expansion of the normal quantile (error < 0.002 there)."""
    if confidence not in _T_TABLE:
        raise ValueError(f"confidence must be one of {', '.join(map(str, CONFIDENCE_LEVELS))}, got {confidence}")
    if df < 1:
        df = 1.0
    table = _T_TABLE[confidence]
    if df <= 30:
        low = int(math.floor(df))
        if low == df or low >= 30:
            return table[low - 1]
        frac = df - low
        return table[low - 1] * (1 - frac) + table[low] * frac
    z = _Z[confidence]
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


def mean_interval(values: Sequence[float | None], confidence: float = 0.95) -> Interval | None:
    """Student t interval of the mean of the per-repeat ``values`` (None values are left out)."""
    data = _finite(values)
    if not data:
        return None
    mean, sd = _mean_sd(data)
    n = len(data)
    if n < 2:
        return Interval(mean=mean, low=None, high=None, confidence=confidence, n=n, method=T_METHOD)
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return Interval(mean=mean, low=mean - half, high=mean + half, confidence=confidence, n=n, method=T_METHOD)


@dataclass(frozen=True)
class RatioInterval:
    ratio: float
    low: float | None
    high: float | None
    confidence: float

    @property
    def significant(self) -> bool | None:
        """True when the interval excludes 1.0; None when there is no interval."""
        if self.low is None or self.high is None:
            return None
        return not (self.low <= 1.0 <= self.high)


def ratio_interval(
    candidate: Sequence[float | None], baseline: Sequence[float | None], confidence: float = 0.95
) -> RatioInterval | None:
    """Interval of mean(candidate) / mean(baseline) over per-repeat values (module doc: the method)."""
    c, b = _finite(candidate), _finite(baseline)
    if not c or not b:
        return None
    mc, sc = _mean_sd(c)
    mb, sb = _mean_sd(b)
    if mc <= 0 or mb <= 0:
        return None
    ratio = mc / mb
    if len(c) < 2 or len(b) < 2:
        return RatioInterval(ratio=ratio, low=None, high=None, confidence=confidence)
    vc = sc**2 / (len(c) * mc**2)
    vb = sb**2 / (len(b) * mb**2)
    se2 = vc + vb
    if se2 == 0:
        return RatioInterval(ratio=ratio, low=ratio, high=ratio, confidence=confidence)
    df = se2**2 / (vc**2 / (len(c) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(confidence, df) * math.sqrt(se2)
    return RatioInterval(ratio=ratio, low=ratio * math.exp(-half), high=ratio * math.exp(half), confidence=confidence)
