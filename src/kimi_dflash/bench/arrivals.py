"""Open-loop load: when conversations arrive and how long a user thinks between turns (pure, seeded).

An open loop sends on a clock that does not wait for the server: conversation k starts at the k-th point
of an arrival process, whatever happened to the others. Closed loops (``--sessions N``) hide a slow server
behind a lower send rate; open loops expose it as growing latency (queueing), which is what a deployment
with a given arrival rate sees.

Arrival processes, for a rate R (arrivals per second), inter-arrival times X:
  poisson   X ~ Exponential(mean 1/R)                  (memoryless; coefficient of variation 1)
  constant  X = 1/R                                      (a metronome; CV 0)
  gamma     X ~ Gamma(shape B, scale 1/(R B))            (mean 1/R; CV 1/sqrt(B): B < 1 bursty, B > 1 smooth,
                                                          B = 1 is poisson). B is --burstiness, as in
                                                          ``vllm bench serve``.
  R = inf   every conversation starts at once (X = 0).
The first arrival is at offset 0 (the window opens with a send), so n arrivals span n - 1 gaps.

Think time between a reply and the next turn of the same conversation:
  fixed     exactly S seconds
  exp       Exponential(mean S)
  uniform   Uniform(0, 2 S)                              (mean S)

The same seed gives the same schedule: a DFlash run and its baseline see the same arrival times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ARRIVALS = ("poisson", "constant", "gamma")
THINK_DISTRIBUTIONS = ("fixed", "exp", "uniform")


@dataclass(frozen=True)
class ArrivalProcess:
    rate: float  # arrivals per second; math.inf: all at once
    process: str = "poisson"
    burstiness: float = 1.0  # gamma shape; only for "gamma"

    def __post_init__(self) -> None:
        if self.process not in ARRIVALS:
            raise ValueError(f"arrival process {self.process!r}: choose one of {', '.join(ARRIVALS)}")
        if not self.rate > 0:
            raise ValueError(f"request rate must be > 0, got {self.rate}")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be > 0, got {self.burstiness}")

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
    distribution: str = "fixed"

    def __post_init__(self) -> None:
        if self.distribution not in THINK_DISTRIBUTIONS:
            raise ValueError(f"think-time distribution {self.distribution!r}: one of {THINK_DISTRIBUTIONS}")
        if self.mean_s < 0:
            raise ValueError(f"think time must be >= 0, got {self.mean_s}")

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


def ks_exponential(gaps: np.ndarray | list[float], rate: float) -> float:
    """Kolmogorov-Smirnov statistic D of ``gaps`` against Exponential(rate) (fully specified, no fit)."""
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
