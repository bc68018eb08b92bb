"""What one request leaves behind: raw ``time.perf_counter()`` timestamps (one clock per run) and counts."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from kimi_dflash.bench.spec_request import RequestSpec
from kimi_dflash.core.options import doc

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
# this machine ran out of descriptors, local ports, buffers or memory: not the server's doing; the run stops
CLIENT_OUT_OF_RESOURCES = "client_out_of_resources"
CANCELLED = "cancelled"  # stopped by Ctrl-C / SIGTERM / run abort; not counted as a failure
# the server may be gone (the run asks it; the warmup hint says so)
CONNECTION_FAILURES = frozenset({CONNECTION_REFUSED, CONNECTION_ERROR, CONNECTION_RESET, CONNECTION_CLOSED})

# Where a record's output token count came from.
TOKENS_FROM_USAGE = "usage"  # usage.completion_tokens, the only trustworthy source
TOKENS_FROM_CHUNKS = "chunks"  # no usage reported: one token per token-bearing chunk (flagged)


@dataclass(slots=True)
class RequestRecord:
    """One request, as observed by the client."""

    sessions: int = doc("concurrency level this request belongs to (0: warmup)")
    repeat: int = doc("repeat index, 0-based")
    session: int = doc("session index within the level")
    turn: int = doc("turn number, 1-based")
    warmup: bool = doc("a warmup request (not measured)", default=False)
    ready_time: float = doc("the client started the request (before building it)", default=0.0)
    send_time: float = doc("request body handed to the socket: TTFT and E2EL start here", default=0.0)
    done_time: float = doc("response fully read, or the failure observed", default=0.0)
    first_token_time: float | None = doc("first chunk with content, reasoning or a tool call", default=None)
    last_token_time: float | None = doc("last such chunk", default=None)
    token_chunks: int = doc("SSE events that carried at least one token", default=0)
    chunk_times: list[float] = doc("arrival time of each token-bearing event", factory=list)
    output_tokens: int | None = doc("N: usage.completion_tokens (or the chunk count, flagged)", default=None)
    tokens_source: str | None = doc("where N came from: usage | chunks", default=None)
    prompt_tokens: int | None = doc("usage.prompt_tokens", default=None)
    finish_reason: str | None = doc("finish_reason of the last choice", default=None)
    status: int | None = doc("HTTP status", default=None)
    error: str | None = doc("failure reason (see docs/benchmark.md); null on success", default=None)
    error_detail: str = doc("what the failure looked like", default="")
    reply_chars: int = doc("characters of content + reasoning received", default=0)
    # Open loop only (--request-rate): when the request should have gone out, and what held it back locally.
    scheduled_time: float | None = doc("open loop: when the arrival process / think time said to send it", default=None)
    dispatch_time: float | None = doc("open loop: when the client's timer actually woke for it", default=None)
    admitted_time: float | None = doc(
        "open loop: when --max-concurrency let it through (= dispatch without a cap)", default=None
    )
    category: str | None = doc("the prompt's category (dataset), e.g. code", omit_if_none=True)
    prompt_id: str | None = doc("the prompt's (or conversation's) id in the dataset", omit_if_none=True)
    reply_sha256: str | None = doc("sha256 of the reply: UTF-8 reasoning, a NUL byte, UTF-8 content", omit_if_none=True)
    token_ids_sha256: str | None = doc(
        "sha256 of the generated token ids as decimal numbers joined by ',' (when the server sent them)",
        omit_if_none=True,
    )
    spec: RequestSpec | None = doc(
        "the server's metrics.speculative_decoding for this request (null: none sent)", omit_if_none=True
    )

    @property
    def ok(self) -> bool:
        return self.error is None

    def relative_to(self, origin: float) -> RequestRecord:
        """A copy with times in seconds from ``origin`` (the run's clock origin), for the raw-records dump."""
        names = [f.name for f in fields(self) if f.name.endswith("_time")]
        times = {name: None if (t := getattr(self, name)) is None else round(t - origin, 6) for name in names}
        return replace(self, **times, chunk_times=[round(t - origin, 6) for t in self.chunk_times])
