"""What the server did: write lag, token counters, spec-decode counters and the per-request truth log."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

REQUEST_LOG_LIMIT = 200_000  # entries kept between resets (a capacity run stays far below)


@dataclass
class Stats:
    requests: int = 0
    streams_active: int = 0
    streams_active_max: int = 0  # most streams in progress at once since the last reset
    writes: int = 0
    lag_sum_s: float = 0.0
    lag_max_s: float = 0.0
    late_writes_1ms: int = 0
    tokens: int = 0  # content tokens written since the last reset
    first_request_at: float | None = None  # loop time of the first request since the last reset
    last_write_at: float | None = None  # loop time of the last content write since the last reset
    faults: dict[str, int] = field(default_factory=dict)
    # What each finished stream actually did, in this host's CLOCK_MONOTONIC seconds (the clock behind
    # both time.monotonic() and time.perf_counter() on Linux), so a client on the same host can compare
    # its own timestamps with the true write times.
    request_log: list[dict[str, Any]] = field(default_factory=list)
    # spec-decode counters (cumulative, like Prometheus counters)
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def record_lag(self, lag: float) -> None:
        self.writes += 1
        self.lag_sum_s += lag
        self.lag_max_s = max(self.lag_max_s, lag)
        if lag > 0.001:
            self.late_writes_1ms += 1

    def stream_started(self) -> None:
        now = time.monotonic()
        self.streams_active += 1
        self.streams_active_max = max(self.streams_active_max, self.streams_active)
        if self.first_request_at is None:
            self.first_request_at = now

    def tokens_written(self, count: int, now: float) -> None:
        self.tokens += count
        self.last_write_at = now

    def count_verify_step(self, chunk_index: int, size: int, spec_tokens: int) -> None:
        """Chunk ``chunk_index`` of ``size`` tokens as vLLM would count it: every chunk after the first is
        one verify step of K drafts with ``size - 1`` accepted at positions 0 .. size - 2."""
        if spec_tokens <= 0 or chunk_index == 0:
            return  # the first token comes from prefill, not from a verify step
        accepted = min(size - 1, spec_tokens)
        self.drafts += 1
        self.draft_tokens += spec_tokens
        self.accepted += accepted
        for pos in range(accepted):
            self.accepted_per_pos[pos] += 1

    def log_request(self, entry: dict[str, Any]) -> None:
        if len(self.request_log) < REQUEST_LOG_LIMIT:
            self.request_log.append(entry)

    def as_dict(self) -> dict[str, Any]:
        window = None
        if self.first_request_at is not None and self.last_write_at is not None:
            window = self.last_write_at - self.first_request_at
        return {
            "tokens": self.tokens,
            "window_s": window,
            "tok_s": self.tokens / window if window else None,
            "requests": self.requests,
            "streams_active": self.streams_active,
            "streams_active_max": self.streams_active_max,
            "writes": self.writes,
            "lag_mean_ms": 1000 * self.lag_sum_s / self.writes if self.writes else 0.0,
            "lag_max_ms": 1000 * self.lag_max_s,
            "late_writes_1ms": self.late_writes_1ms,
            "faults": dict(self.faults),
            "spec_decode": {
                "drafts": self.drafts,
                "draft_tokens": self.draft_tokens,
                "accepted": self.accepted,
                "accepted_per_pos": list(self.accepted_per_pos),
            },
        }

    def reset_timing(self) -> None:
        self.request_log = []
        self.tokens = 0
        self.first_request_at = None
        self.last_write_at = None
        self.writes = 0
        self.lag_sum_s = 0.0
        self.lag_max_s = 0.0
        self.late_writes_1ms = 0
        self.streams_active_max = self.streams_active
