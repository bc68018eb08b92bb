"""core/http.py, the one small blocking client for non-hot paths, against local stdlib servers: JSON both ways, the
bearer key as a header, error statuses returned (not raised), refused connections raised as OSError, and a read cap
for servers that ignore a Range header."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kimi_dflash.core import http


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *_args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path == "/big":
            self._send(200, b"x" * 100_000)  # ignores any Range header, as some servers do
            return
        if self.path.startswith("/redirect?to="):  # another server, or this one
            self.send_response(302)
            self.send_header("Location", self.path.partition("=")[2])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/missing":
            self._send(404, b'{"error": "no such thing"}')
            return
        seen = {"authorization": self.headers.get("Authorization"), "range": self.headers.get("Range")}
        self._send(200, json.dumps(seen).encode())

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length", 0))
        echoed = {"body": json.loads(self.rfile.read(length)), "type": self.headers.get("Content-Type")}
        self._send(200, json.dumps(echoed).encode())


def _serve() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


base_url = pytest.fixture(scope="module")(_serve)
other_url = pytest.fixture(scope="module")(_serve)


def test_get_sends_the_key_as_a_bearer_header_and_reads_json(base_url: str) -> None:
    reply = http.request(f"{base_url}/seen", api_key="k-123", headers={"Range": "bytes=0-9"})
    assert reply.status == 200 and reply.json() == {"authorization": "Bearer k-123", "range": "bytes=0-9"}
    assert http.request(f"{base_url}/seen").json()["authorization"] is None


def test_post_sends_json(base_url: str) -> None:
    reply = http.request(f"{base_url}/echo", body={"prompt": "Hello", "max_tokens": 1})
    assert reply.json() == {"body": {"prompt": "Hello", "max_tokens": 1}, "type": "application/json"}


def test_an_error_status_comes_back_and_a_refused_connection_raises_oserror(base_url: str) -> None:
    missing = http.request(f"{base_url}/missing")
    assert missing.status == 404 and missing.json() == {"error": "no such thing"}
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(OSError):
        http.request(f"http://127.0.0.1:{port}/health", timeout_s=2)


def test_max_bytes_caps_what_is_read(base_url: str) -> None:
    assert len(http.request(f"{base_url}/big", max_bytes=10).body) == 10
    assert len(http.request(f"{base_url}/big").body) == 100_000


def test_the_key_follows_a_redirect_to_its_own_origin_only(base_url: str, other_url: str) -> None:
    # urllib copied Authorization to wherever a redirect pointed: another port on loopback got the key.
    elsewhere = http.request(f"{base_url}/redirect?to={other_url}/seen", api_key="k-123")
    assert elsewhere.status == 200 and elsewhere.json()["authorization"] is None
    home = http.request(f"{base_url}/redirect?to={base_url}/seen", api_key="k-123")
    assert home.status == 200 and home.json()["authorization"] == "Bearer k-123"
