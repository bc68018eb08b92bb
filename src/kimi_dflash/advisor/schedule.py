"""Depth by load from a measured k x concurrency grid as NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE (docs/workflows.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import mean

from kimi_dflash.advisor.model import spec_tokens_of
from kimi_dflash.bench.intervals import RatioInterval, ratio_interval
from kimi_dflash.bench.result import BenchmarkResult, LevelResult
from kimi_dflash.config.depth_schedule import DepthRange
from kimi_dflash.config.schema import KEY
from kimi_dflash.core.errors import UserError

Samples = Mapping[tuple[int, int], Sequence[float]]  # (k, sessions) -> aggregate tok/s of each repeat


@dataclass(frozen=True)
class Choice:
    sessions: int
    k: int
    output_tok_s: float  # mean over the chosen k's repeats
    over: int | None  # the shallower k it beat beyond the interval; None: the shallowest measured
    interval: RatioInterval | None  # chosen / over, aggregate tok/s


def grid_samples(results: Sequence[tuple[str, BenchmarkResult]]) -> dict[tuple[int, int], list[float]]:
    """Every repeat's aggregate tok/s by (k, sessions), pooled over files; runs served with a schedule are left out."""
    samples: dict[tuple[int, int], list[float]] = {}
    for _, result in results:
        if result.server_config and result.server_config.values.get(KEY.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE):
            continue
        for level in (lv for lv in result.results if lv.output_tok_s is not None and not lv.partial):
            samples.setdefault((spec_tokens_of(result, level), level.sessions), []).extend(repeats_of(level))
    return samples


def repeats_of(level: LevelResult) -> list[float]:
    """A level's aggregate tok/s per repeat (one value when it was measured once)."""
    repeats = [r.output_tok_s for r in level.repeat_results if r.output_tok_s is not None]
    return repeats or ([] if level.output_tok_s is None else [level.output_tok_s])


def choose_depths(samples: Samples, confidence: float = 0.95) -> list[Choice]:
    """Per concurrency the shallowest measured k >= 1, replaced by each deeper k whose tok/s ratio interval over the
    current choice's lies wholly above 1: a tie, however close, keeps the shallower."""
    if thin := sorted(f"k={k} at {s} sessions" for (k, s), v in samples.items() if k >= 1 and len(v) < 2):
        raise UserError(
            f"{', '.join(thin)}: one measurement, no interval. A schedule compares k by their intervals: measure "
            "each point at least twice (--repeats 3, or repeated sweep rounds)."
        )
    choices = []
    for sessions in sorted({s for k, s in samples if k >= 1}):
        depths = sorted(k for k, s in samples if s == sessions and k >= 1)
        chosen, over, interval = depths[0], None, None
        for k in depths[1:]:
            beat = ratio_interval(samples[k, sessions], samples[chosen, sessions], confidence)
            if beat is not None and beat.low is not None and beat.low > 1.0:
                chosen, over, interval = k, chosen, beat
        choices.append(Choice(sessions, chosen, mean(samples[chosen, sessions]), over, interval))
    return choices


def schedule_of(choices: Sequence[Choice]) -> tuple[DepthRange, ...]:
    """Batch sizes to the first measured concurrency take its k, those between two the shallower one's (no unmeasured
    load gets a deeper k than a neighbour); the last k runs on, open."""
    starts: list[tuple[int, int]] = []  # (first batch size, k)
    for before, choice in zip([None, *choices], choices):
        if before is not None and choice.sessions > before.sessions + 1:
            starts.append((before.sessions + 1, min(before.k, choice.k)))
        starts.append((1 if before is None else choice.sessions, choice.k))
    merged = [s for i, s in enumerate(starts) if i == 0 or s[1] != starts[i - 1][1]]
    ends = [first - 1 for first, _ in merged[1:]] + [None]
    return tuple(DepthRange(first, end, k) for (first, k), end in zip(merged, ends))
