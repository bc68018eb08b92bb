"""A fast, exactly-timed fake OpenAI streaming server (stdlib asyncio only).

It exists to check the benchmark against a known truth and to measure how many streams the client can
follow. Every stream follows a schedule fixed by the command line:

* the role chunk and the first content chunk are written ``--ttft-ms`` after the request body arrives;
* one content chunk every ``--chunk-interval-ms`` after that, carrying ``--chunk-tokens`` tokens (a
  comma-separated list cycles: ``3,1,2`` means chunks of 3, 1, 2, 3, 1, 2 ... tokens);
* ``N = max_tokens`` tokens in total (``--output-tokens`` caps it), the last content chunk carries the
  finish reason, then a usage chunk with empty ``choices``, then ``data: [DONE]``.

So a client should measure TTFT = ttft, E2EL = ttft + (C - 1) * interval for C content chunks, and
TPOT = (C - 1) * interval / (N - 1). With ``--spec-tokens K`` it also exports vLLM's speculative-decoding
counters on ``/metrics``, derived from the chunks it wrote: every content chunk after the first is one
verify step with K draft tokens and ``size - 1`` accepted tokens (positions 0 .. size - 2).

``--faults`` injects misbehaviour, one entry per request in arrival order, cycling. The HTTP layer is a
hand-written HTTP/1.1 protocol (keep-alive, chunked responses) rather than a web framework so that one
core can feed thousands of streams on schedule; ``GET /stats`` reports how late the writes were.

Usage: python -m kimi_dflash.bench.synthetic_server --port 0 --ttft-ms 100 --chunk-interval-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

FAULTS = {
    "ok": "normal stream",
    "http_500": "HTTP 500 with a JSON error body",
    "http_429": "HTTP 429 (rate limited) with Retry-After",
    "reset": "two content chunks, then a TCP reset",
    "eof": "two content chunks, then the connection closes in the middle of the chunked body",
    "truncate": "two content chunks, then a clean end of body without data: [DONE]",
    "malformed": "one content chunk, then a data event that is not JSON",
    "error_event": "one content chunk, then data: {\"error\": ...} and [DONE] (what vLLM does on engine errors)",
    "stall": "one content chunk, then silence (the client's timeout must fire)",
    "hang": "never answers (not even headers)",
    "comments": "normal stream with ': ping' comment lines between events",
    "coalesce": "normal stream, all remaining events of a request written in bursts of three per write",
    "split": "normal stream, every event split in two writes in the middle of its JSON",
    "crlf": "normal stream with CRLF line endings",
    "no_usage": "normal stream without the usage chunk",
    "die": "two content chunks, then the whole server process exits",
}

WORDS = [
    " alpha", " beta", " gamma", " delta", " eps", " zeta", " eta", " theta", " iota", " kappa",
    " lambda", " mu", " nu", " xi", " omicron", " pi", " rho", " sigma", " tau", " upsilon",
]  # fmt: skip


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
    aligned: bool = False  # one shared ticker for all streams (cheap; TTFT then varies by < 1 interval)


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


@dataclass
class Stats:
    requests: int = 0
    streams_active: int = 0
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
        if lag > self.lag_max_s:
            self.lag_max_s = lag
        if lag > 0.001:
            self.late_writes_1ms += 1

    def stream_started(self) -> None:
        now = time.monotonic()
        self.streams_active += 1
        if self.first_request_at is None:
            self.first_request_at = now

    def tokens_written(self, count: int, now: float) -> None:
        self.tokens += count
        self.last_write_at = now

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


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _response(status: str, body: bytes, content_type: str = "application/json", extra: str = "") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        f"{extra}Connection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)
END_OF_BODY = b"0\r\n\r\n"


class _Stream:
    """One streaming (or non-streaming) completion, driven by loop timers."""

    def __init__(self, conn: _Connection, request: dict[str, Any], chat: bool, fault: str) -> None:
        server = conn.server
        self.conn = conn
        self.server = server
        self.loop = server.loop
        self.chat = chat
        self.fault = fault
        schedule = server.schedule
        requested = request.get("max_completion_tokens") or request.get("max_tokens") or 16
        total = int(requested)
        if schedule.output_tokens is not None:
            total = min(total, schedule.output_tokens)
        self.total = max(total, 1)
        self.sizes = plan_chunks(self.total, schedule.chunk_tokens)
        self.include_usage = bool((request.get("stream_options") or {}).get("include_usage")) and fault != "no_usage"
        self.prompt_tokens = _count_prompt_words(request)
        self.model = str(request.get("model") or schedule.model)
        self.index = 0
        self.tokens_sent = 0
        self.start = self.loop.time()
        self.received_at = time.monotonic()  # same as start under asyncio; precise under uvloop too
        self.handle: asyncio.TimerHandle | None = None
        self.finished = False
        self.first_tick = 0  # --aligned: the shared tick that carries this stream's first chunk
        self.first_write_at: float | None = None
        self.crlf = fault == "crlf"
        self.sep = b"\r\n\r\n" if self.crlf else b"\n\n"
        self.pending: list[bytes] = []  # events held back by "coalesce"
        self.split_tail: bytes | None = None  # second half of an event held back by "split"
        self.split_handle: asyncio.TimerHandle | None = None
        # One id for every stream: clients do not look at it, and it lets events be cached.
        self.prefix = (
            f'{{"id":"cmpl-synthetic","object":"{"chat.completion.chunk" if chat else "text_completion"}",'
            f'"created":{server.created},"model":{json.dumps(self.model)},"choices":['
        ).encode()

    # -- event builders -------------------------------------------------------------------------
    def _event(self, payload: bytes) -> bytes:
        return b"data: " + payload + self.sep

    def _content_event(self, size: int, last: bool) -> bytes:
        schedule = self.server.schedule
        start = self.tokens_sent
        reasoning_left = min(max(0, schedule.reasoning_tokens - start), size) if self.chat else 0
        key = (self.chat, self.crlf, size, start % len(WORDS), last, reasoning_left, self.model)
        cached = self.server.event_cache.get(key)
        if cached is not None:
            return cached
        text = "".join(WORDS[(start + j) % len(WORDS)] for j in range(size))
        finish = b'"length"' if last else b"null"
        if self.chat:
            if reasoning_left >= size:
                delta = {schedule.reasoning_field: text}
            elif reasoning_left > 0:  # a chunk that straddles the end of the reasoning
                split = len("".join(WORDS[(start + j) % len(WORDS)] for j in range(reasoning_left)))
                delta = {schedule.reasoning_field: text[:split], "content": text[split:]}
            else:
                delta = {"content": text}
            choice = b'{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}' % (
                json.dumps(delta, separators=(",", ":")).encode(),
                finish,
            )
        else:
            choice = b'{"index":0,"text":%s,"logprobs":null,"finish_reason":%s}' % (json.dumps(text).encode(), finish)
        event = self._event(self.prefix + choice + b"]}")
        if len(self.server.event_cache) < 100_000:
            self.server.event_cache[key] = event
        return event

    def _role_event(self) -> bytes:
        return self._event(
            self.prefix + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
        )

    def _usage_event(self) -> bytes:
        usage = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.total,
            "completion_tokens": self.total,
        }
        return self._event(self.prefix + b"]," + b'"usage":' + json.dumps(usage).encode() + b"}")

    # -- driving --------------------------------------------------------------------------------
    def start_stream(self) -> None:
        self.server.stats.stream_started()
        if self.fault == "hang":
            return
        self.conn.write(STREAM_HEAD)
        if self.server.schedule.early_role and self.chat:
            # Some servers send the role chunk at once; it carries no token, so TTFT must not stop here.
            self.conn.write(_http_chunk(self._role_event()))
        if self.server.schedule.aligned:
            self.server.enroll(self)
        else:
            self._schedule_next()

    def start_plain(self) -> None:
        self.server.stats.stream_started()
        if self.fault == "hang":
            return
        schedule = self.server.schedule
        delay = schedule.ttft_s + (len(self.sizes) - 1) * schedule.chunk_interval_s
        self.handle = self.loop.call_at(self.start + delay, self._finish_plain)

    def _deadline(self) -> float:
        schedule = self.server.schedule
        return self.start + schedule.ttft_s + self.index * schedule.chunk_interval_s

    def _schedule_next(self) -> None:
        self.handle = self.loop.call_at(self._deadline(), self._tick)

    def _tick(self) -> None:
        self.handle = None
        self.server.stats.record_lag(self.loop.time() - self._deadline())
        if self.emit_next():
            self._schedule_next()

    def emit_next(self) -> bool:
        """Write the next content chunk (and whatever must follow it). True if more chunks remain."""
        i = self.index
        size = self.sizes[i]
        last = i == len(self.sizes) - 1
        out: list[bytes] = []
        if i == 0 and self.chat and not self.server.schedule.early_role:
            out.append(self._role_event())
        out.append(self._content_event(size, last))
        if self.fault == "comments":
            out.append(b": ping" + self.sep)
        self.tokens_sent += size
        now = time.monotonic()
        self.server.stats.tokens_written(size, now)
        if i == 0:
            self.first_write_at = now
        if last:
            self._log(now)
        self._count_spec(i, size)
        self.index += 1
        fault = self.fault
        if fault in ("reset", "eof", "truncate", "die") and self.index == 3:
            self._emit(out)
            self._break_off()
            return False
        if fault in ("malformed", "error_event", "stall") and self.index == 2:
            if fault == "malformed":
                out.append(b'data: {"id": "oops", "choices": [ {"delta": ' + self.sep)
            elif fault == "error_event":
                out.append(self._event(b'{"error":{"object":"error","message":"engine died","code":500}}'))
                out.append(self._event(b"[DONE]"))
            self._emit(out)
            if fault != "stall":
                self._end_body()
            return False  # stall: keep the connection open and silent
        if last:
            if self.include_usage:
                out.append(self._usage_event())
            out.append(self._event(b"[DONE]"))
            self._emit(out, final=True)
            self._end_body()
            return False
        self._emit(out)
        return True

    def _emit(self, events: list[bytes], final: bool = False) -> None:
        if self.fault == "coalesce" and self.index > 1:
            self.pending.extend(events)
            if len(self.pending) >= 3 or final:
                self.conn.write(_http_chunk(b"".join(self.pending)))
                self.pending.clear()
            return
        payload = b"".join(events)
        self._flush_split()
        if self.fault == "split":
            half = max(1, len(payload) // 2)
            self.conn.write(_http_chunk(payload[:half]))
            # The second half follows a little later, in its own TCP segment (or right before the next
            # write, if the loop is running late: bytes must never overtake each other).
            self.split_tail = _http_chunk(payload[half:])
            self.split_handle = self.loop.call_later(0.002, self._flush_split)
            return
        self.conn.write(_http_chunk(payload))

    def _flush_split(self) -> None:
        if self.split_handle is not None:
            self.split_handle.cancel()
            self.split_handle = None
        if self.split_tail is not None:
            tail, self.split_tail = self.split_tail, None
            self.conn.write(tail)

    def _end_body(self) -> None:
        self._mark_finished()
        if self.fault == "split":
            self.loop.call_later(0.004, self._finish_split)
        else:
            self.conn.finish_response(END_OF_BODY)

    def _finish_split(self) -> None:
        self._flush_split()
        self.conn.finish_response(END_OF_BODY)

    def _break_off(self) -> None:
        self._mark_finished()
        fault = self.fault
        if fault == "truncate":
            self.conn.finish_response(END_OF_BODY)
        elif fault == "eof":
            self.conn.close()
        elif fault == "reset":
            self.conn.reset()
        elif fault == "die":
            sys.stdout.flush()
            os._exit(3)

    def _log(self, last_write_at: float) -> None:
        log = self.server.stats.request_log
        if len(log) < 200_000:
            log.append(
                {
                    "received_at": self.received_at,
                    "first_write_at": self.first_write_at,
                    "last_write_at": last_write_at,
                    "tokens": self.total,
                    "chunks": len(self.sizes),
                    "fault": self.fault,
                }
            )

    def _mark_finished(self) -> None:
        if not self.finished:
            self.finished = True
            self.server.stats.streams_active -= 1

    def _count_spec(self, index: int, size: int) -> None:
        k = self.server.schedule.spec_tokens
        if k <= 0 or index == 0:
            return  # the first token comes from prefill, not from a verify step
        stats = self.server.stats
        accepted = min(size - 1, k)
        stats.drafts += 1
        stats.draft_tokens += k
        stats.accepted += accepted
        for pos in range(accepted):
            stats.accepted_per_pos[pos] += 1

    def _finish_plain(self) -> None:
        self.handle = None
        schedule = self.server.schedule
        self.server.stats.record_lag(
            self.loop.time() - self.start - schedule.ttft_s - (len(self.sizes) - 1) * schedule.chunk_interval_s
        )
        now = time.monotonic()
        self.server.stats.tokens_written(self.total, now)
        self.first_write_at = now
        self._log(now)
        for i, size in enumerate(self.sizes):
            self._count_spec(i, size)
        text = "".join(WORDS[j % len(WORDS)] for j in range(self.total))
        reasoning_n = min(self.server.schedule.reasoning_tokens, self.total) if self.chat else 0
        split = len("".join(WORDS[j % len(WORDS)] for j in range(reasoning_n)))
        usage = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.total,
            "completion_tokens": self.total,
        }
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text[split:]}
            if reasoning_n:
                message[self.server.schedule.reasoning_field] = text[:split]
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
        body = json.dumps({"id": "cmpl", "object": "chat.completion", "model": self.model, "choices": [choice], "usage": usage})
        self._mark_finished()
        self.conn.finish_response(_response("200 OK", body.encode()))

    def cancel(self) -> None:
        """The client went away mid-stream."""
        if self.finished:
            return
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        self.finished = True
        self.server.stats.streams_active -= 1


def _count_prompt_words(request: dict[str, Any]) -> int:
    if "messages" in request:
        words = 0
        for message in request.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                words += len(content.split())
            elif isinstance(content, list):
                words += sum(len(str(part.get("text", "")).split()) for part in content if isinstance(part, dict))
        return words
    prompt = request.get("prompt")
    return len(prompt.split()) if isinstance(prompt, str) else 1


class _Connection(asyncio.Protocol):
    """HTTP/1.1 with keep-alive; one request at a time per connection (no pipelining)."""

    MAX_HEAD = 64 * 1024

    def __init__(self, server: SyntheticServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.stream: _Stream | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.stream.cancel()
            self.stream = None
        self.transport = None

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def finish_response(self, data: bytes) -> None:
        self.write(data)
        self.stream = None
        self.busy = False
        if self.buffer:
            self._process()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def reset(self) -> None:
        if self.transport is not None:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._process()

    def _process(self) -> None:
        while not self.busy and self.transport is not None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > self.MAX_HEAD:
                    self.write(_response("431 Request Header Fields Too Large", b"{}"))
                    self.close()
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            try:
                method, target, _version = head[0].split(" ", 2)
            except ValueError:
                self.write(_response("400 Bad Request", b'{"error":"bad request line"}'))
                self.close()
                return
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.write(_response("411 Length Required", b'{"error":"send Content-Length"}'))
                self.close()
                return
            length = int(headers.get("content-length", "0") or 0)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.busy = True
            key = self.server.schedule.api_key
            if key is not None and headers.get("authorization") != f"Bearer {key}":
                self.finish_response(_response("401 Unauthorized", b'{"error":"missing or wrong API key"}'))
                continue
            self.server.handle(self, method, target, body)


class SyntheticServer:
    """Routes requests; holds the schedule and the counters."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.stats = Stats(accepted_per_pos=[0] * max(schedule.spec_tokens, 0))
        self.loop = asyncio.get_running_loop()
        self.created = int(time.time())
        self.event_cache: dict[tuple[Any, ...], bytes] = {}
        self.aligned: list[_Stream] = []  # streams driven by the shared ticker (--aligned)
        self.tick_handle: asyncio.TimerHandle | None = None
        self.tick_index = 0
        self.epoch = self.loop.time()

    def enroll(self, stream: _Stream) -> None:
        """--aligned: the stream's chunks go out on shared ticks, every chunk_interval from the epoch."""
        interval = self.schedule.chunk_interval_s
        due = stream.start + self.schedule.ttft_s
        stream.first_tick = max(math.ceil((due - self.epoch) / interval), self.tick_index + 1)
        self.aligned.append(stream)
        if self.tick_handle is None:
            self.tick_index = stream.first_tick
            self.tick_handle = self.loop.call_at(self.epoch + self.tick_index * interval, self._tick_all)

    def _tick_all(self) -> None:
        interval = self.schedule.chunk_interval_s
        k = self.tick_index
        self.stats.record_lag(self.loop.time() - (self.epoch + k * interval))
        keep: list[_Stream] = []
        for stream in self.aligned:
            if stream.finished:
                continue
            if stream.first_tick > k:
                keep.append(stream)
            elif stream.emit_next():
                keep.append(stream)
        self.aligned = keep
        if keep:
            self.tick_index = k + 1
            self.tick_handle = self.loop.call_at(self.epoch + self.tick_index * interval, self._tick_all)
        else:
            self.tick_handle = None

    def handle(self, conn: _Connection, method: str, target: str, body: bytes) -> None:
        path, _, query = target.partition("?")
        if method == "GET":
            conn.finish_response(self._get(path, query))
            return
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            conn.finish_response(_response("404 Not Found", b'{"error":"not found"}'))
            return
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise ValueError("body is not an object")
        except ValueError:
            conn.finish_response(_response("400 Bad Request", b'{"error":"body is not JSON"}'))
            return
        faults = self.schedule.faults
        fault = faults[self.stats.requests % len(faults)]
        self.stats.requests += 1
        self.stats.faults[fault] = self.stats.faults.get(fault, 0) + 1
        if fault == "http_500":
            conn.finish_response(_response("500 Internal Server Error", b'{"error":{"message":"injected failure"}}'))
            return
        if fault == "http_429":
            conn.finish_response(_response("429 Too Many Requests", b'{"error":"slow down"}', extra="Retry-After: 1\r\n"))
            return
        stream = _Stream(conn, request, chat=path.endswith("chat/completions"), fault=fault)
        conn.stream = stream
        if request.get("stream"):
            stream.start_stream()
        else:
            stream.start_plain()

    def _get(self, path: str, query: str) -> bytes:
        if path == "/health":
            return _response("200 OK", b"")
        if path == "/version":
            return _response("200 OK", b'{"version":"synthetic"}')
        if path == "/v1/models":
            body = {
                "object": "list",
                "data": [
                    {
                        "id": self.schedule.model,
                        "object": "model",
                        "owned_by": "kimi-dflash-synthetic",
                        "root": self.schedule.model,
                        "max_model_len": self.schedule.max_model_len,
                    }
                ],
            }
            return _response("200 OK", json.dumps(body).encode())
        if path == "/metrics":
            return _response("200 OK", self.prometheus_text().encode(), content_type="text/plain; version=0.0.4")
        if path == "/stats/requests":
            return _response("200 OK", json.dumps(self.stats.request_log).encode())
        if path == "/stats":
            body = json.dumps(self.stats.as_dict()).encode()
            if "reset=1" in query:
                self.stats.reset_timing()
            return _response("200 OK", body)
        return _response("404 Not Found", b'{"error":"not found"}')

    def prometheus_text(self) -> str:
        labels = f'engine="0",model_name="{self.schedule.model}"'
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {float(self.stats.streams_active)}",
        ]
        if self.schedule.spec_tokens > 0:
            stats = self.stats
            for name, value in (
                ("num_drafts", stats.drafts),
                ("num_draft_tokens", stats.draft_tokens),
                ("num_accepted_tokens", stats.accepted),
            ):
                lines += [
                    f"# HELP vllm:spec_decode_{name} Synthetic spec-decode counter.",
                    f"# TYPE vllm:spec_decode_{name} counter",
                    f"vllm:spec_decode_{name}_total{{{labels}}} {float(value)}",
                    f"vllm:spec_decode_{name}_created{{{labels}}} 1.7e9",
                ]
            lines += [
                "# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per draft position.",
                "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
            ]
            for pos, value in enumerate(stats.accepted_per_pos):
                lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{pos}"}} {float(value)}')
        return "\n".join(lines) + "\n"


@contextlib.contextmanager
def running(args: list[str], python: str = sys.executable, startup_timeout_s: float = 20.0) -> Iterator[str]:
    """Start the server in its own process (so it does not share the client's core); yield its base URL.

    Used by the tests and benchmarks/client_capacity.py. The process is always stopped on exit.
    """
    process = subprocess.Popen(
        [python, "-m", "kimi_dflash.bench.synthetic_server", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], startup_timeout_s)
        line = process.stdout.readline() if ready else ""
        if not line.startswith("listening on "):
            process.kill()
            _, err = process.communicate(timeout=10)
            raise RuntimeError(f"synthetic server did not start: {line!r} {err.strip()[-2000:]}")
        yield line.split()[-1]
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kimi_dflash.bench.synthetic_server",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="faults:\n" + "\n".join(f"  {name:<12} {doc}" for name, doc in FAULTS.items()),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default)")
    parser.add_argument("--ttft-ms", type=float, default=100.0, help="request body received -> first content chunk")
    parser.add_argument("--chunk-interval-ms", type=float, default=20.0, help="gap between content chunks")
    parser.add_argument("--chunk-tokens", default="1", help="tokens per chunk, a comma list cycles (e.g. 3,1,2)")
    parser.add_argument("--output-tokens", type=int, default=None, help="cap on tokens per reply (default: max_tokens)")
    parser.add_argument("--reasoning-tokens", type=int, default=0, help="first R tokens stream as reasoning deltas")
    parser.add_argument("--reasoning-field", default="reasoning", choices=["reasoning", "reasoning_content"])
    parser.add_argument("--spec-tokens", type=int, default=0, help="K > 0: export spec-decode counters on /metrics")
    parser.add_argument("--faults", default="ok", help="comma list of per-request behaviours, cycled (see below)")
    parser.add_argument("--model", default="synthetic", help="model id served on /v1/models")
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU core")
    parser.add_argument("--api-key", default=None, help="require this bearer token on every request")
    parser.add_argument("--early-role", action="store_true", help="send the role-only chunk at once, before TTFT")
    parser.add_argument(
        "--aligned",
        action="store_true",
        help="drive all streams from one shared ticker (for capacity runs: far cheaper per chunk; the first "
        "chunk then waits for the next tick, so TTFT varies by up to one interval while chunk gaps stay exact)",
    )
    parser.add_argument(
        "--uvloop",
        action="store_true",
        help="use uvloop if installed (faster, but its clock has 1 ms resolution: keep it off for exact TTFT)",
    )
    args = parser.parse_args(argv)
    try:
        args.chunk_tokens = tuple(int(x) for x in args.chunk_tokens.split(","))
        if not args.chunk_tokens or min(args.chunk_tokens) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--chunk-tokens must be positive integers separated by commas, got {args.chunk_tokens!r}")
    args.faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = [f for f in args.faults if f not in FAULTS]
    if unknown or not args.faults:
        parser.error(f"unknown fault(s) {unknown}; choose from {', '.join(FAULTS)}")
    if args.aligned and args.faults != ("ok",):
        parser.error("--aligned is for capacity runs; use the default per-stream timers with --faults")
    if args.spec_tokens > 0 and max(args.chunk_tokens) > args.spec_tokens + 1:
        parser.error("--chunk-tokens may not exceed --spec-tokens + 1 (a verify step yields at most K + 1 tokens)")
    return args


async def serve(schedule: Schedule, host: str, port: int) -> None:
    server = SyntheticServer(schedule)
    listener = await server.loop.create_server(lambda: _Connection(server), host, port, backlog=4096)
    bound = listener.sockets[0].getsockname()[1]
    # The first stdout line is the contract with whoever started us (tests, client_capacity).
    print(f"listening on http://{host}:{bound}", flush=True)
    async with listener:
        await listener.serve_forever()


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    schedule = Schedule(
        ttft_s=args.ttft_ms / 1000,
        chunk_interval_s=args.chunk_interval_ms / 1000,
        chunk_tokens=args.chunk_tokens,
        output_tokens=args.output_tokens,
        reasoning_tokens=args.reasoning_tokens,
        reasoning_field=args.reasoning_field,
        spec_tokens=args.spec_tokens,
        faults=args.faults,
        model=args.model,
        aligned=args.aligned,
        early_role=args.early_role,
        api_key=args.api_key,
    )
    runner = asyncio.run
    if args.uvloop:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    try:
        runner(serve(schedule, args.host, args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
