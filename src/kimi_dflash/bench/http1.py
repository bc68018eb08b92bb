"""A minimal HTTP/1.1 connection for the hot path, one per session (why not aiohttp, and its scope:
docs/benchmark.md, "How the client keeps out of the way")."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

perf_counter = time.perf_counter

MAX_HEAD = 64 * 1024
OnBody = Callable[[float, bytes], None] | None
OnSent = Callable[[float], None]


class BadResponse(Exception):
    """The server did not speak HTTP/1.1 as expected."""


class ConnectionClosed(ConnectionError):
    """The server closed the connection before the response body ended."""


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    tls: bool
    host_header: str

    @classmethod
    def from_url(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        default = (tls and port == 443) or (not tls and port == 80)
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        return cls(host=host, port=port, tls=tls, host_header=shown if default else f"{shown}:{port}")


@dataclass
class Response:
    status: int = 0
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # only when no on_body callback was given
    keep_alive: bool = True


class _Protocol(asyncio.Protocol):
    """Parses one response at a time; calls ``on_body(arrival_time, bytes)`` once per network read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reset(None, None)

    def _reset(self, future: asyncio.Future[Response] | None, on_body: OnBody) -> None:
        self.future = future
        self.on_body = on_body
        self.response = Response()
        self.head = b""
        self.in_body = False
        self.mode = ""  # "chunked" | "length" | "close"
        self.remaining = 0  # length mode: body bytes still expected; chunked: bytes left in this chunk
        self.chunk_state = "size"  # size | data | crlf | trailer
        self.pending = b""  # chunked: an unfinished size line / trailer
        self.collected: list[bytes] = []

    # -- asyncio callbacks ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        arrival = perf_counter()  # the one timestamp per read
        future = self.future
        if future is None or future.done():
            # Bytes nobody asked for (or after an answer): the connection cannot be trusted any more.
            self.closed = True
            if self.transport is not None:
                self.transport.close()
            return
        try:
            if not self.in_body:
                data = self._parse_head(data)
                if not self.in_body:
                    return
            if data or self.mode == "length" and self.remaining == 0:
                self._body(arrival, data)
        except Exception as exc:  # noqa: BLE001 - a protocol violation or a callback failure ends this request
            self._fail(exc)

    def eof_received(self) -> bool | None:
        return False  # let the transport close; connection_lost judges the response

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        future = self.future
        if future is None or future.done():
            return
        if self.in_body and self.mode == "close" and exc is None:
            self._complete()
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            where = "inside the response body" if self.in_body else "before the response headers"
            future.set_exception(ConnectionClosed(f"server closed the connection {where}"))

    # -- parsing --------------------------------------------------------------------------------
    def _parse_head(self, data: bytes) -> bytes:
        buf = self.head + data if self.head else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise BadResponse("response headers larger than 64 KiB")
                self.head = buf
                return b""
            lines = buf[:end].decode("latin-1").split("\r\n")
            buf = buf[end + 4 :]
            version, code, reason = [*lines[0].split(" ", 2), "", ""][:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise BadResponse(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
            status = int(code)
            if 100 <= status < 200:
                continue  # interim response (100 Continue, 103 Early Hints): the real one follows
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                if not colon:
                    raise BadResponse(f"malformed header line {line[:80]!r}")
                key = name.strip().lower()
                headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
            response = self.response
            response.status, response.reason, response.headers = status, reason, headers
            connection = headers.get("connection", "").lower()
            response.keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.mode = "chunked"
            elif "content-length" in headers:
                try:
                    self.remaining = int(headers["content-length"])
                except ValueError:
                    raise BadResponse(f"bad Content-Length {headers['content-length']!r}") from None
                self.mode = "length"
            elif status in (204, 304):
                self.mode, self.remaining = "length", 0
            else:
                self.mode = "close"
                response.keep_alive = False
            self.head, self.in_body = b"", True
            return buf

    def _body(self, arrival: float, data: bytes) -> None:
        if self.mode == "length":
            if len(data) > self.remaining:
                raise BadResponse("more body bytes than Content-Length")
            self.remaining -= len(data)
            if data:
                self._deliver(arrival, data)
            if self.remaining == 0:
                self._complete()
        elif self.mode == "chunked":
            pieces, finished = self._dechunk(data)
            if pieces:
                self._deliver(arrival, pieces[0] if len(pieces) == 1 else b"".join(pieces))
            if finished:
                self._complete()
        else:
            self._deliver(arrival, data)

    def _dechunk(self, data: bytes) -> tuple[list[bytes], bool]:
        """Incremental chunked decoding: (payload pieces in this read, body finished)."""
        if self.chunk_state == "size" and not self.pending:
            # Fast path: a read that is exactly one whole chunk (one SSE event per write, the usual case).
            end = data.find(b"\r\n")
            if 0 < end <= 8:
                try:
                    size = int(data[:end], 16)
                except ValueError:
                    size = 0
                stop = end + 2 + size
                if size and len(data) == stop + 2 and data[stop:] == b"\r\n":
                    return [data[end + 2 : stop]], False
        pieces: list[bytes] = []
        buf, i = (self.pending + data if self.pending else data), 0
        self.pending = b""
        while i < len(buf):
            state = self.chunk_state
            if state == "data":
                piece = buf[i : i + self.remaining]
                pieces.append(piece)
                i, self.remaining = i + len(piece), self.remaining - len(piece)
                self.chunk_state = "data" if self.remaining else "crlf"
                continue
            if state == "crlf":
                if len(buf) - i < 2:
                    self.pending = buf[i:]
                    break
                if buf[i : i + 2] != b"\r\n":
                    raise BadResponse("chunk not followed by CRLF")
                i, self.chunk_state = i + 2, "size"
                continue
            end = buf.find(b"\r\n", i)
            if end < 0:  # an unfinished line: kept for the next read
                if state == "size" and len(buf) - i > 1024:
                    raise BadResponse("chunk size line too long")
                self.pending = buf[i:]
                break
            line, i = buf[i:end], end + 2
            if state == "size":
                size_text = line.split(b";", 1)[0].strip()
                try:
                    self.remaining = int(size_text, 16)
                except ValueError:
                    raise BadResponse(f"bad chunk size {size_text[:20]!r}") from None
                self.chunk_state = "data" if self.remaining else "trailer"
            elif not line:  # the empty line that ends the trailer
                if i < len(buf):
                    raise BadResponse("bytes after the end of a chunked body")
                return pieces, True
        return pieces, False

    def _deliver(self, arrival: float, data: bytes) -> None:
        if self.on_body is not None and self.response.status == 200:
            self.on_body(arrival, data)
        else:  # no callback, or an error response: keep the body for the caller
            self.collected.append(data)

    @property
    def answered(self) -> bool:
        """Any byte of a response has arrived for the current request."""
        return self.in_body or bool(self.head)

    def _complete(self) -> None:
        future = self.future
        if future is not None and not future.done():
            self.response.body = b"".join(self.collected)
            future.set_result(self.response)

    def _fail(self, exc: BaseException) -> None:
        future = self.future
        if future is not None and not future.done():
            future.set_exception(exc)
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class Connection:
    """One session's keep-alive connection; reconnects when the previous one cannot be reused."""

    def __init__(self, target: Target, connect_timeout_s: float = 30.0) -> None:
        self.target = target
        self.connect_timeout_s = connect_timeout_s
        self.ssl_context = ssl.create_default_context() if target.tls else None
        self.protocol: _Protocol | None = None

    @property
    def usable(self) -> bool:
        p = self.protocol
        return p is not None and not p.closed and p.transport is not None and not p.transport.is_closing()

    async def connect(self) -> None:
        if self.usable:
            return
        self.close()
        # TLS checks the host's name
        connecting = asyncio.get_running_loop().create_connection(
            _Protocol, self.target.host, self.target.port, ssl=self.ssl_context
        )
        _, self.protocol = await asyncio.wait_for(connecting, timeout=self.connect_timeout_s)

    def close(self, abort: bool = False) -> None:
        """``abort``: drop the connection without flushing (a request failed mid-way)."""
        transport = self.protocol.transport if self.protocol is not None else None
        if transport is not None:
            transport.abort() if abort else transport.close()
        self.protocol = None

    async def post(
        self, path: str, body: bytes, headers: dict[str, str], on_body: OnBody, on_sent: OnSent, timeout_s: float
    ) -> Response:
        """``on_sent(t)`` gets when the bytes reached the socket; raises OSError, ConnectionClosed, BadResponse."""
        deadline = perf_counter() + timeout_s
        message = (
            f"POST {path} HTTP/1.1\r\nHost: {self.target.host_header}\r\nContent-Length: {len(body)}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + "\r\n"
        ).encode("latin-1") + body
        reused = self.usable
        try:
            return await self._exchange(message, on_body, on_sent, deadline)
        except (ConnectionClosed, ConnectionResetError, BrokenPipeError) as exc:
            # A kept-alive connection the server closed (idle timeout) fails before any response byte: the
            # request never reached the server, so it is sent again on a fresh connection, once.
            if not reused or getattr(exc, "answered", True):
                raise
            return await self._exchange(message, on_body, on_sent, deadline)

    async def _exchange(self, message: bytes, on_body: OnBody, on_sent: OnSent, deadline: float) -> Response:
        await asyncio.wait_for(self.connect(), timeout=max(deadline - perf_counter(), 0.001))
        protocol = self.protocol
        assert protocol is not None and protocol.transport is not None
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        protocol._reset(future, on_body)
        on_sent(perf_counter())
        protocol.transport.write(message)
        try:
            response = await asyncio.wait_for(asyncio.shield(future), timeout=max(deadline - perf_counter(), 0.0))
        except BaseException as exc:
            answered = protocol.answered
            self.close(abort=True)  # failed, timed out or cancelled mid-response: never reuse this connection
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()  # retrieved: no "exception was never retrieved" warning
            if isinstance(exc, Exception):
                exc.answered = answered  # type: ignore[attr-defined]
            raise
        finally:
            protocol.future = None
        if not response.keep_alive:
            self.close()
        return response
