"""The misbehaviours ``--faults`` injects, one per request in arrival order, cycling.

What each fault does, and when: an immediate error answer, a stream cut short after a few chunks (with
a broken or error event), a connection broken off (reset, close mid-body, truncation, process death),
or a normal stream framed awkwardly (comments, coalesced or split writes, CRLF, no usage chunk).
"""

from __future__ import annotations

import asyncio
import os
import sys

from synthetic_server.events import StreamEvents
from synthetic_server.http import END_OF_BODY, Connection, http_chunk, response

FAULTS = {
    "ok": "normal stream",
    "http_500": "HTTP 500 with a JSON error body",
    "http_429": "HTTP 429 (rate limited) with Retry-After",
    "reset": "two content chunks, then a TCP reset",
    "eof": "two content chunks, then the connection closes in the middle of the chunked body",
    "truncate": "two content chunks, then a clean end of body without data: [DONE]",
    "malformed": "one content chunk, then a data event that is not JSON",
    "error_event": 'one content chunk, then data: {"error": ...} and [DONE] (what vLLM does on engine errors)',
    "stall": "one content chunk, then silence (the client's timeout must fire)",
    "hang": "never answers (not even headers)",
    "comments": "normal stream with ': ping' comment lines between events",
    "coalesce": "normal stream, all remaining events of a request written in bursts of three per write",
    "split": "normal stream, every event split in two writes in the middle of its JSON",
    "crlf": "normal stream with CRLF line endings",
    "no_usage": "normal stream without the usage chunk",
    "die": "two content chunks, then the whole server process exits",
}

# The connection is broken off once this many content chunks were counted (the last one still written).
BREAK_OFF = frozenset({"reset", "eof", "truncate", "die"})
BREAK_OFF_AFTER_CHUNKS = 3
# The stream ends early, after this many content chunks, with a bad last word (or silence: stall).
CUT_SHORT = frozenset({"malformed", "error_event", "stall"})
CUT_SHORT_AFTER_CHUNKS = 2
SPLIT_TAIL_DELAY_S = 0.002  # the second half of a split write follows in its own TCP segment
SPLIT_END_DELAY_S = 0.004


def pick(faults: tuple[str, ...], request_number: int) -> str:
    return faults[request_number % len(faults)]


def immediate_response(fault: str) -> bytes | None:
    """The whole answer of a fault that never streams (None: it streams)."""
    if fault == "http_500":
        return response("500 Internal Server Error", b'{"error":{"message":"injected failure"}}')
    if fault == "http_429":
        return response("429 Too Many Requests", b'{"error":"slow down"}', extra="Retry-After: 1\r\n")
    return None


def last_words(fault: str, events: StreamEvents) -> list[bytes]:
    """What a stream cut short (``CUT_SHORT``) writes after its last content chunk."""
    if fault == "malformed":
        return [b'data: {"id": "oops", "choices": [ {"delta": ' + events.sep]
    if fault == "error_event":
        return [events.event(b'{"error":{"object":"error","message":"engine died","code":500}}'), events.done()]
    return []  # stall: nothing, and the connection stays open


def break_off(conn: Connection, fault: str) -> None:
    """End a ``BREAK_OFF`` stream the way the fault says."""
    if fault == "truncate":
        conn.finish_response(END_OF_BODY)
    elif fault == "eof":
        conn.close()
    elif fault == "reset":
        conn.reset()
    elif fault == "die":
        sys.stdout.flush()
        os._exit(3)


class BodyWriter:
    """Writes a stream's events as HTTP chunks: one write per chunk, or as ``coalesce`` / ``split`` frame them."""

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop, fault: str) -> None:
        self.conn = conn
        self.loop = loop
        self.fault = fault
        self.pending: list[bytes] = []  # events held back by "coalesce"
        self.split_tail: bytes | None = None  # second half of an event held back by "split"
        self.split_handle: asyncio.TimerHandle | None = None

    def write(self, events: list[bytes], chunks_counted: int, final: bool = False) -> None:
        if self.fault == "coalesce" and chunks_counted > 1:
            self.pending.extend(events)
            if len(self.pending) >= 3 or final:
                self.conn.write(http_chunk(b"".join(self.pending)))
                self.pending.clear()
            return
        payload = b"".join(events)
        self.flush_split()
        if self.fault == "split":
            half = max(1, len(payload) // 2)
            self.conn.write(http_chunk(payload[:half]))
            # The second half follows a little later, in its own TCP segment (or right before the next
            # write, if the loop is running late: bytes must never overtake each other).
            self.split_tail = http_chunk(payload[half:])
            self.split_handle = self.loop.call_later(SPLIT_TAIL_DELAY_S, self.flush_split)
            return
        self.conn.write(http_chunk(payload))

    def flush_split(self) -> None:
        if self.split_handle is not None:
            self.split_handle.cancel()
            self.split_handle = None
        if self.split_tail is not None:
            tail, self.split_tail = self.split_tail, None
            self.conn.write(tail)

    def end_body(self) -> None:
        if self.fault == "split":
            self.loop.call_later(SPLIT_END_DELAY_S, self._end_split)
        else:
            self.conn.finish_response(END_OF_BODY)

    def _end_split(self) -> None:
        self.flush_split()
        self.conn.finish_response(END_OF_BODY)
