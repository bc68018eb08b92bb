"""NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE: the speculative depth k at each batch size, written `1-4:4,5-16:3,17-:2`
(batch sizes FIRST-LAST, or FIRST- for "and above", then k). vLLM (0.24+) takes inclusive (first, last, k) triples
and carries a range's k through a gap and past the last range, and clamps k to num_speculative_tokens, without a
word (v1/spec_decode/dynamic/utils.py): here the ranges start at 1 and follow each other without gap or overlap."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_RANGE = re.compile(r"(\d+)(-(\d*))?:(\d+)")
EXAMPLE = "1-4:4,5-16:3,17-:2"


@dataclass(frozen=True)
class DepthRange:
    first: int
    last: int | None  # None: every larger batch too
    k: int

    def __str__(self) -> str:
        return f"{self.first}-{'' if self.last is None else self.last}:{self.k}"


def parse_schedule(text: str) -> tuple[DepthRange, ...]:
    """'1-4:4,5-:2' -> ranges; ValueError naming the first entry that is malformed, out of order, or leaves a gap."""
    ranges: list[DepthRange] = []
    for entry in (e.strip() for e in text.split(",")):
        match = _RANGE.fullmatch(entry)
        if match is None:
            raise ValueError(f"{entry!r} is not FIRST-LAST:K (batch sizes, then the depth k), e.g. {EXAMPLE}")
        first, k = int(match[1]), int(match[4])
        depth = DepthRange(first, first if match[2] is None else int(match[3]) if match[3] else None, k)
        after = ranges[-1].last if ranges else 0
        if after is None or first != after + 1:
            gap = "" if after is None else " (a gap)" if first > after + 1 else " (an overlap)"
            place = "after an open range" if after is None else f"{entry!r} starts at {first}, not {after + 1}{gap}"
            raise ValueError(f"ranges must start at batch size 1 and follow each other without gap or overlap: {place}")
        if depth.last is not None and depth.last < first:
            raise ValueError(f"{entry!r} ends before it starts")
        if k < 1:
            raise ValueError(f"{entry!r}: k must be at least 1 (at k = 0 the drafter still runs every step)")
        ranges.append(depth)
    return tuple(ranges)


def vllm_schedule(ranges: Sequence[DepthRange], max_num_seqs: int) -> list[list[int]]:
    """vLLM's `num_speculative_tokens_per_batch_size`: an open last range ends at MAX_NUM_SEQS (or its own first)."""
    return [[r.first, max(r.first, max_num_seqs) if r.last is None else r.last, r.k] for r in ranges]


def format_schedule(ranges: Sequence[DepthRange]) -> str:
    return ",".join(map(str, ranges))
