"""Inputs that used to crash: each gets a message naming the problem and the fix, its documented exit code, and
no traceback."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from repo_paths import REPO_ROOT

pytestmark = pytest.mark.realtime  # a hanging server is given up on after a timeout


def _clean(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr + result.stdout
    return result.stderr


class _NotJson(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = b"<html>not an API</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _not_json_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotJson)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@contextmanager
def _hanging_server() -> Iterator[str]:
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def _validate(reference: str) -> subprocess.CompletedProcess[str]:
    # --probe-timeout: the hanging server is given up on after 2 s instead of the default 30
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "payload" / "validate.py"), "--reference", reference, "--candidate",
         reference, "--prompts", "1", "--no-math", "--probe-timeout", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("server", [_not_json_server, _hanging_server])
def test_validate_with_a_broken_reference_exits_3(server: object) -> None:
    with server() as url:  # type: ignore[operator]
        result = _validate(url)
    err = _clean(result)
    assert result.returncode == 3, err
    assert "did not answer JSON" in err or "did not answer in time" in err
