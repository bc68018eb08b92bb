"""The hand-written HTTP/1.1 response parser: framing corner cases, fed byte by byte, without a network."""

from __future__ import annotations

import asyncio

import pytest

from kimi_dflash.bench.http1 import BadResponse, ConnectionClosed, Response, Target, _Protocol


class FakeTransport:
    def __init__(self) -> None:
        self.closed = self.aborted = False

    def get_extra_info(self, name: str) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted


def parse(
    raw: bytes, *, split: int | None = None, eof: bool = False, stream: bool = True
) -> tuple[asyncio.Future[Response], list[bytes]]:
    loop = asyncio.new_event_loop()
    try:
        protocol = _Protocol()
        protocol.connection_made(FakeTransport())  # type: ignore[arg-type]
        future: asyncio.Future[Response] = loop.create_future()
        pieces: list[bytes] = []
        protocol._reset(future, (lambda t, data: pieces.append(data)) if stream else None)
        step = split or len(raw) or 1
        for i in range(0, len(raw), step):
            protocol.data_received(raw[i : i + step])
        if eof:
            protocol.connection_lost(None)
        return future, pieces
    finally:
        loop.close()


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"6\r\ndata: \r\n"
    b'9;ext=1\r\n{"a": 1}\n\r\n'
    b"1\r\n\n\r\n"
    b"0\r\nX-Trailer: yes\r\n\r\n"
)


@pytest.mark.parametrize("split", [None, 1, 2, 3, 7])
def test_chunked_body_any_split(split: int | None) -> None:
    future, pieces = parse(CHUNKED, split=split)
    assert future.done() and future.result().status == 200
    assert b"".join(pieces) == b'data: {"a": 1}\n\n'
    assert future.result().keep_alive


def test_content_length_and_error_body_kept_for_the_caller() -> None:
    raw = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 11\r\n\r\nslow down!!"
    future, pieces = parse(raw, split=5)
    response = future.result()
    assert (response.status, response.reason, response.body) == (429, "Too Many Requests", b"slow down!!")
    assert pieces == []  # error bodies never reach the stream callback


def test_interim_response_is_skipped_and_headers_are_case_insensitive() -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nCONTENT-length: 2\r\nConnection: close\r\n\r\nok"
    future, _ = parse(raw, stream=False)
    assert future.result().body == b"ok" and not future.result().keep_alive


def test_body_until_close() -> None:
    future, pieces = parse(b"HTTP/1.0 200 OK\r\n\r\nabc", eof=True)
    assert future.result().status == 200 and pieces == [b"abc"]


def test_connection_closed_mid_body() -> None:
    future, _ = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", eof=True)
    with pytest.raises(ConnectionClosed, match="inside the response body"):
        future.result()
    future, _ = parse(b"", eof=True)
    with pytest.raises(ConnectionClosed, match="before the response headers"):
        future.result()


@pytest.mark.parametrize(
    "raw",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbroken header line\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ntoo long",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
    ],
    ids=["not-http", "bad-header", "bad-size", "no-crlf-after-chunk", "overlong", "bad-length"],
)
def test_protocol_violations(raw: bytes) -> None:
    future, _ = parse(raw)
    with pytest.raises(BadResponse):
        future.result()


def test_target_from_url() -> None:
    assert Target.from_url("http://127.0.0.1:8000") == Target("127.0.0.1", 8000, False, "127.0.0.1:8000")
    assert Target.from_url("https://gpu.example") == Target("gpu.example", 443, True, "gpu.example")
    assert Target.from_url("http://[::1]:9000").host_header == "[::1]:9000"
    with pytest.raises(ValueError):
        Target.from_url("ftp://x")
