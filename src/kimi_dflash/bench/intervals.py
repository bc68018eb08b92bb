"""Confidence intervals over repeats, and of a speedup between two runs (formulas: docs/benchmark.md). The repeat is
the unit: requests of one window share the server's batch, so an interval over requests would be far too narrow."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kimi_dflash.core.options import doc

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


CONFIDENCE_LEVELS = (0.90, 0.95, 0.99)
# Two-sided Student t quantiles t(1 - α/2, df): one line per df = 1 .. 30, one column per confidence level.
_T_ROWS = """
 6.314 12.706 63.657
 2.920  4.303  9.925
 2.353  3.182  5.841
 2.132  2.776  4.604
 2.015  2.571  4.032
 1.943  2.447  3.707
 1.895  2.365  3.499
 1.860  2.306  3.355
 1.833  2.262  3.250
 1.812  2.228  3.169
 1.796  2.201  3.106
 1.782  2.179  3.055
 1.771  2.160  3.012
 1.761  2.145  2.977
 1.753  2.131  2.947
 1.746  2.120  2.921
 1.740  2.110  2.898
 1.734  2.101  2.878
 1.729  2.093  2.861
 1.725  2.086  2.845
 1.721  2.080  2.831
 1.717  2.074  2.819
 1.714  2.069  2.807
 1.711  2.064  2.797
 1.708  2.060  2.787
 1.706  2.056  2.779
 1.703  2.052  2.771
 1.701  2.048  2.763
 1.699  2.045  2.756
 1.697  2.042  2.750
"""
_T_TABLE = dict(zip(CONFIDENCE_LEVELS, zip(*(map(float, row.split()) for row in _T_ROWS.strip().splitlines()))))
_Z = {0.90: 1.6449, 0.95: 1.9600, 0.99: 2.5758}


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
