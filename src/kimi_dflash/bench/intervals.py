"""Confidence intervals over repeats, and of a speedup between two runs (formulas: docs/benchmark.md). The repeat is
the unit: requests of one window share the server's batch, so an interval over requests would be far too narrow."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

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
# Two-sided Student t quantiles t(1 - α/2, df): one line per df = 1 .. 7, one column per confidence level.
_T_ROWS = """
 6.314 12.706 63.657
 2.920  4.303  9.925
 2.353  3.182  5.841
 2.132  2.776  4.604
 2.015  2.571  4.032
 1.943  2.447  3.707
 1.895  2.365  3.499
"""
_T_TABLE = dict(zip(CONFIDENCE_LEVELS, zip(*(map(float, row.split()) for row in _T_ROWS.strip().splitlines()))))


def t_quantile(confidence: float, df: float) -> float:
    """t(1 - α/2, df): a table below df 7, then Fisher's expansion in 1/df (within 0.0005 of printed tables)."""
    if confidence not in _T_TABLE:
        raise ValueError(f"confidence must be one of {', '.join(map(str, CONFIDENCE_LEVELS))}, got {confidence}")
    df, table = max(df, 1.0), _T_TABLE[confidence]
    if df < 7:
        low = int(df)
        return table[low - 1] + (table[low] - table[low - 1]) * (df - low)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    terms = (z**3 + z, 5 * z**5 + 16 * z**3 + 3 * z, 3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z)
    last = 79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z
    return z + terms[0] / (4 * df) + terms[1] / (96 * df**2) + terms[2] / (384 * df**3) + last / (92160 * df**4)


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
