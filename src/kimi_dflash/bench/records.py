"""What one request leaves behind: raw timestamps and counts, no derived metrics.

All times are ``time.perf_counter()`` seconds (monotonic, same clock for every request of a run).
Metrics are computed later, by pure functions in ``metrics.py``, so they can be recomputed and tested.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Failure reasons (``RequestRecord.error``). HTTP errors are "http_<status>", e.g. "http_429".
CONNECTION_REFUSED = "connection_refused"  # nobody listening: server down or wrong --base-url
CONNECTION_ERROR = "connection_error"  # other connect failures (DNS, unreachable, TLS)
CONNECTION_RESET = "connection_reset"  # TCP reset while sending or receiving
CONNECTION_CLOSED = "connection_closed"  # server closed the connection before the body ended
TIMEOUT = "timeout"  # --timeout elapsed
TRUNCATED_STREAM = "truncated_stream"  # body ended cleanly but without "data: [DONE]"
MALFORMED_SSE = "malformed_sse"  # a data event that is not a JSON object
SERVER_ERROR_EVENT = "server_error_event"  # the stream carried {"error": ...}
EMPTY_RESPONSE = "empty_response"  # finished without a single token-bearing chunk
BAD_RESPONSE = "bad_response"  # non-stream body not JSON / no choices
CLIENT_ERROR = "client_error"  # anything else raised inside the client (detail says what)
CANCELLED = "cancelled"  # stopped by Ctrl-C / SIGTERM / run abort; not counted as a failure

# Where a record's output token count came from.
TOKENS_FROM_USAGE = "usage"  # usage.completion_tokens, the only trustworthy source
TOKENS_FROM_CHUNKS = "chunks"  # no usage reported: one token per token-bearing chunk (flagged)


@dataclass(slots=True)
class RequestRecord:
    """One request, as observed by the client."""

    sessions: int  # concurrency level this request belongs to
    repeat: int
    session: int
    turn: int  # 1-based
    warmup: bool = False
    ready_time: float = 0.0  # the client started the request (before building it)
    send_time: float = 0.0  # the request body was handed to the socket: TTFT and E2EL start here
    done_time: float = 0.0  # response fully read (or failure observed)
    first_token_time: float | None = None  # first chunk with non-empty content/reasoning/tool call
    last_token_time: float | None = None  # last such chunk
    token_chunks: int = 0  # SSE events that carried at least one token
    chunk_times: list[float] = field(default_factory=list)  # arrival time of each token-bearing event
    output_tokens: int | None = None
    tokens_source: str | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    status: int | None = None  # HTTP status
    error: str | None = None  # failure reason, None on success
    error_detail: str = ""
    reply_chars: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self, origin: float) -> dict[str, Any]:
        """Times relative to ``origin`` (the run's first send), in seconds, for the raw-records dump."""
        data = asdict(self)
        for key in ("ready_time", "send_time", "done_time", "first_token_time", "last_token_time"):
            if data[key] is not None:
                data[key] = round(data[key] - origin, 6)
        data["chunk_times"] = [round(t - origin, 6) for t in self.chunk_times]
        return data
