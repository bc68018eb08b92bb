"""Inputs that used to crash: each gets a message naming the problem and the fix, its documented exit code, and
no traceback."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench_helpers import bench_in_process
from extras import needs_cpu_extra
from repo_paths import CONFIGS_DIR, REPO_ROOT
from serve_helpers import run_serve, serve_in_process


def _clean(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr + result.stdout
    return result.stderr


def test_symlink_loop_config(tmp_path: Path) -> None:
    loop = tmp_path / "loop.env"
    loop.symlink_to(loop)
    result = serve_in_process(str(loop), "--dry-run")
    assert result.returncode == 2 and "symlink" in _clean(result)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge"])
def test_non_regular_or_huge_config_is_refused_before_reading(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "config.env"
        os.mkfifo(path)  # nobody writes: reading would block forever
    elif kind == "dev_zero":
        path = Path("/dev/zero")  # reading would never end
    else:
        path = tmp_path / "huge.env"
        path.write_text("# x\n" * 400_000)
    result = run_serve(str(path), "--dry-run")
    err = _clean(result)
    assert result.returncode == 2 and "cannot read config file" in err
    expected = {"fifo": "is a FIFO", "dev_zero": "is a device", "huge": "over the 1 MiB"}[kind]
    assert expected in err


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 truncated"])
def test_empty_or_truncated_wheel_for_check_vllm(tmp_path: Path, content: bytes) -> None:
    wheel = tmp_path / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(content)
    result = serve_in_process(str(CONFIGS_DIR / "demo-cpu.env"), "--check-vllm", str(wheel))
    assert result.returncode == 2 and "is not a readable wheel" in _clean(result)


@needs_cpu_extra
def test_log_pointing_at_a_directory(tmp_path: Path) -> None:
    result = run_serve(str(CONFIGS_DIR / "demo-cpu.env"), "--wait", "--skip-preflight", "--log", str(tmp_path),
                       env={"KIMI_DFLASH_CACHE": str(tmp_path / "cache")})  # fmt: skip
    assert result.returncode == 2 and "is a directory" in _clean(result) and "nothing was started" in result.stderr


@pytest.mark.parametrize("flag", ["--temperature", "--timeout"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_refused(tmp_path: Path, flag: str, value: str) -> None:
    result = bench_in_process(
        "--base-url", "http://127.0.0.1:9", "--output", str(tmp_path / "r.json"), f"{flag}={value}"
    )
    assert result.returncode == 2 and "finite" in _clean(result)


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


def _validate(reference: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "payload" / "validate.py"), "--reference", reference, "--candidate",
         reference, "--prompts", "1", "--no-math"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_url_key_is_not_echoed_by_validate() -> None:
    with _not_json_server() as url:
        result = _validate(url.replace("http://", "http://user:sk-hidden-987654@"))
    assert "sk-hidden-987654" not in result.stdout + result.stderr
