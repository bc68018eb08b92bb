"""The timing and shape every stream follows, and how a reply is cut into chunks (pure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    """The timing and shape every stream follows."""

    ttft_s: float = 0.1
    chunk_interval_s: float = 0.02
    chunk_tokens: tuple[int, ...] = (1,)
    output_tokens: int | None = None  # cap on max_tokens; None = exactly max_tokens
    reasoning_tokens: int = 0  # the first R tokens stream as delta.reasoning
    reasoning_field: str = "reasoning"
    spec_tokens: int = 0  # K > 0 exports spec-decode counters
    faults: tuple[str, ...] = ("ok",)
    model: str = "synthetic"
    max_model_len: int = 65536
    api_key: str | None = None  # if set, every request needs "Authorization: Bearer <key>"
    early_role: bool = False  # write the role-only chunk as soon as the request arrives
    per_request_spec: str = "none"  # none | summary | detailed: metrics.speculative_decoding per reply (as vLLM)
    aligned: bool = False  # one shared ticker for all streams (cheap; TTFT then varies by < 1 interval)

    def reply_tokens(self, requested: int) -> int:
        """Tokens in a reply to a request asking for ``requested`` (at least one)."""
        total = requested if self.output_tokens is None else min(requested, self.output_tokens)
        return max(total, 1)


def plan_chunks(total_tokens: int, pattern: tuple[int, ...]) -> list[int]:
    """Token counts of the content chunks for a reply of ``total_tokens`` tokens."""
    sizes: list[int] = []
    remaining = total_tokens
    i = 0
    while remaining > 0:
        size = min(pattern[i % len(pattern)], remaining)
        sizes.append(size)
        remaining -= size
        i += 1
    return sizes
