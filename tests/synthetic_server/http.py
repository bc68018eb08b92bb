"""HTTP/1.1 for the synthetic server: keep-alive, one request at a time per connection, chunked bodies.

Hand-written on ``asyncio.Protocol`` rather than a web framework, so one core can feed thousands of
streams on schedule. The connection parses requests and hands them to a handler; whatever drives the
response writes through it and calls ``finish_response`` when the response is complete.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Protocol

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)
END_OF_BODY = b"0\r\n\r\n"
MAX_HEAD = 64 * 1024


def http_chunk(payload: bytes) -> bytes:
    """One chunk of a chunked transfer-encoded body."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def response(status: str, body: bytes, content_type: str = "application/json", extra: str = "") -> bytes:
    """A complete response with a Content-Length body."""
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        f"{extra}Connection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


class ActiveResponse(Protocol):
    def cancel(self) -> None:
        """The client went away before the response was complete."""


class RequestHandler(Protocol):
    api_key: str | None

    def handle(self, conn: Connection, method: str, target: str, body: bytes) -> None:
        """Answer one request (now, or later through ``conn``), ending with ``conn.finish_response``."""


class Connection(asyncio.Protocol):
    """HTTP/1.1 with keep-alive; one request at a time per connection (no pipelining)."""

    def __init__(self, handler: RequestHandler) -> None:
        self.handler = handler
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.stream: ActiveResponse | None = None
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
        """Abort with a TCP reset (SO_LINGER 0) instead of a clean close."""
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
                if len(self.buffer) > MAX_HEAD:
                    self.write(response("431 Request Header Fields Too Large", b"{}"))
                    self.close()
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            try:
                method, target, _version = head[0].split(" ", 2)
            except ValueError:
                self.write(response("400 Bad Request", b'{"error":"bad request line"}'))
                self.close()
                return
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.write(response("411 Length Required", b'{"error":"send Content-Length"}'))
                self.close()
                return
            length = int(headers.get("content-length", "0") or 0)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.busy = True
            key = self.handler.api_key
            if key is not None and headers.get("authorization") != f"Bearer {key}":
                self.finish_response(response("401 Unauthorized", b'{"error":"missing or wrong API key"}'))
                continue
            self.handler.handle(self, method, target, body)
