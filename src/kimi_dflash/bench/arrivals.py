"""Open-loop arrivals and think times, seeded so a run and its baseline get one schedule (docs/benchmark.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

ArrivalName = Literal["poisson", "constant", "gamma"]
ThinkTimeDist = Literal["fixed", "exp", "uniform"]


@dataclass(frozen=True)
class ArrivalProcess:
    rate: float  # arrivals per second; math.inf: all at once
    process: ArrivalName = "poisson"
    burstiness: float = 1.0  # gamma shape; only for "gamma"

    def gaps(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` inter-arrival times, seconds."""
        if math.isinf(self.rate):
            return np.zeros(count)
        mean = 1.0 / self.rate
        if self.process == "constant":
            return np.full(count, mean)
        if self.process == "poisson":
            return rng.exponential(mean, count)
        return rng.gamma(self.burstiness, mean / self.burstiness, count)

    def offsets(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """Start offsets of ``count`` arrivals from the window's start: 0, then cumulative gaps."""
        if count <= 0:
            return np.zeros(0)
        return np.concatenate(([0.0], np.cumsum(self.gaps(count - 1, rng))))


@dataclass(frozen=True)
class ThinkTime:
    mean_s: float = 0.0
    distribution: ThinkTimeDist = "fixed"

    def draw(self, rng: np.random.Generator) -> float:
        if self.mean_s == 0 or self.distribution == "fixed":
            return self.mean_s
        if self.distribution == "exp":
            return float(rng.exponential(self.mean_s))
        return float(rng.uniform(0.0, 2.0 * self.mean_s))


def level_rng(seed: int, rate: float, repeat: int, stream: int) -> np.random.Generator:
    """A generator for one (rate level, repeat) and purpose: 0 arrivals, 1 + session think times."""
    rate_key = 0 if math.isinf(rate) else int(round(rate * 1_000_000))
    return np.random.default_rng([seed & 0xFFFFFFFF, rate_key, repeat, stream])


def parse_rates(text: str) -> tuple[float, ...]:
    """``"1,2,4"`` or ``"inf"``: request rates, in order, duplicates dropped. ValueError names the problem."""
    rates: list[float] = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        try:
            value = math.inf if part in ("inf", "infinity") else float(part)
        except ValueError:
            raise ValueError(f"expected rates (req/s) separated by commas, or inf; got {text!r}") from None
        if not value > 0 or math.isnan(value):
            raise ValueError(f"request rates must be > 0 (inf: all at once); got {text!r}")
        if math.isinf(value) and part not in ("inf", "infinity"):  # 1e400: a typo, not "all at once"
            raise ValueError(f"request rate {part} is not a finite number; write inf to start all at once")
        rates.append(value)
    if not rates:
        raise ValueError(f"expected at least one request rate, got {text!r}")
    return tuple(dict.fromkeys(rates))
