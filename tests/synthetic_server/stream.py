"""One completion on the schedule: streaming (timer per chunk, or the shared ticker) or non-streaming."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from synthetic_server import faults, spec_metrics
from synthetic_server.events import StreamEvents, count_prompt_words, plain_body
from synthetic_server.http import STREAM_HEAD, Connection, http_chunk, response
from synthetic_server.schedule import Schedule, plan_chunks
from synthetic_server.stats import Stats


class StreamHost(Protocol):
    """What a stream needs from the server that runs it."""

    schedule: Schedule
    stats: Stats
    loop: asyncio.AbstractEventLoop
    created: int
    event_cache: dict[tuple[Any, ...], bytes]

    def enroll(self, stream: Stream) -> None:
        """--aligned: have the shared ticker drive this stream."""


class Stream:
    """One streaming (or non-streaming) completion, driven by loop timers."""

    def __init__(self, host: StreamHost, conn: Connection, request: dict[str, Any], chat: bool, fault: str) -> None:
        self.host = host
        self.conn = conn
        self.loop = host.loop
        self.chat = chat
        self.fault = fault
        schedule = host.schedule
        self.total = schedule.reply_tokens(int(request.get("max_completion_tokens") or request.get("max_tokens") or 16))
        self.sizes = plan_chunks(self.total, schedule.chunk_tokens)
        self.include_usage = bool((request.get("stream_options") or {}).get("include_usage")) and fault != "no_usage"
        self.prompt_tokens = count_prompt_words(request)
        self.model = str(request.get("model") or schedule.model)
        self.index = 0
        self.tokens_sent = 0
        self.start = self.loop.time()
        self.received_at = time.monotonic()  # same as start under asyncio; precise under uvloop too
        self.handle: asyncio.TimerHandle | None = None
        self.finished = False
        self.first_tick = 0  # --aligned: the shared tick that carries this stream's first chunk
        self.first_write_at: float | None = None
        self.events = StreamEvents(schedule, host.event_cache, host.created, chat, self.model, crlf=fault == "crlf")
        self.body = faults.BodyWriter(conn, self.loop, fault)

    # -- driving --------------------------------------------------------------------------------
    def start_stream(self) -> None:
        self.host.stats.stream_started()
        if self.fault == "hang":
            return
        self.conn.write(STREAM_HEAD)
        if self.host.schedule.early_role and self.chat:
            # Some servers send the role chunk at once; it carries no token, so TTFT must not stop here.
            self.conn.write(http_chunk(self.events.role()))
        if self.host.schedule.aligned:
            self.host.enroll(self)
        else:
            self._schedule_next()

    def start_plain(self) -> None:
        self.host.stats.stream_started()
        if self.fault == "hang":
            return
        schedule = self.host.schedule
        delay = schedule.ttft_s + (len(self.sizes) - 1) * schedule.chunk_interval_s
        self.handle = self.loop.call_at(self.start + delay, self._finish_plain)

    def _deadline(self) -> float:
        schedule = self.host.schedule
        return self.start + schedule.ttft_s + self.index * schedule.chunk_interval_s

    def _schedule_next(self) -> None:
        self.handle = self.loop.call_at(self._deadline(), self._tick)

    def _tick(self) -> None:
        self.handle = None
        self.host.stats.record_lag(self.loop.time() - self._deadline())
        if self.emit_next():
            self._schedule_next()

    def emit_next(self) -> bool:
        """Write the next content chunk (and whatever must follow it). True if more chunks remain."""
        i = self.index
        size = self.sizes[i]
        last = i == len(self.sizes) - 1
        out: list[bytes] = []
        if i == 0 and self.chat and not self.host.schedule.early_role:
            out.append(self.events.role())
        out.append(self.events.content(self.tokens_sent, size, last))
        if self.fault == "comments":
            out.append(b": ping" + self.events.sep)
        self.tokens_sent += size
        now = time.monotonic()
        stats = self.host.stats
        stats.tokens_written(size, now)
        if i == 0:
            self.first_write_at = now
        if last:
            self._log(now)
        stats.count_verify_step(i, size, self.host.schedule.spec_tokens)
        self.index += 1
        if self.fault in faults.BREAK_OFF and self.index == faults.BREAK_OFF_AFTER_CHUNKS:
            self.body.write(out, self.index)
            self._mark_finished()
            faults.break_off(self.conn, self.fault)
            return False
        if self.fault in faults.CUT_SHORT and self.index == faults.CUT_SHORT_AFTER_CHUNKS:
            self.body.write(out + faults.last_words(self.fault, self.events), self.index)
            if self.fault != "stall":  # stall: keep the connection open and silent
                self._end_body()
            return False
        if last:
            if self.include_usage:
                out.append(self.events.usage(self.prompt_tokens, self.total, self._spec_metrics()))
            out.append(self.events.done())
            self.body.write(out, self.index, final=True)
            self._end_body()
            return False
        self.body.write(out, self.index)
        return True

    def _spec_metrics(self) -> dict[str, Any] | None:
        schedule = self.host.schedule
        block = spec_metrics.block(self.sizes, schedule.spec_tokens, schedule.per_request_spec)
        return {"speculative_decoding": block} if block else None

    def _end_body(self) -> None:
        self._mark_finished()
        self.body.end_body()

    def _log(self, last_write_at: float) -> None:
        self.host.stats.log_request(
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
            self.host.stats.streams_active -= 1

    def _finish_plain(self) -> None:
        self.handle = None
        schedule = self.host.schedule
        stats = self.host.stats
        stats.record_lag(
            self.loop.time() - self.start - schedule.ttft_s - (len(self.sizes) - 1) * schedule.chunk_interval_s
        )
        now = time.monotonic()
        stats.tokens_written(self.total, now)
        self.first_write_at = now
        self._log(now)
        for i, size in enumerate(self.sizes):
            stats.count_verify_step(i, size, schedule.spec_tokens)
        body = plain_body(schedule, self.chat, self.model, self.prompt_tokens, self.total, self._spec_metrics())
        self._mark_finished()
        self.conn.finish_response(response("200 OK", body))

    def cancel(self) -> None:
        """The client went away mid-stream."""
        if self.finished:
            return
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        self.finished = True
        self.host.stats.streams_active -= 1
