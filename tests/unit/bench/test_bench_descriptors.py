"""File descriptors: a run that needs more than the process may open is refused (or the soft limit raised) before
anything is measured, and a shortage mid-run is reported as the client's, never as "server stopped answering",
with the finished levels kept. Each run is a subprocess whose RLIMIT_NOFILE a small wrapper lowers."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from bench_helpers import BENCH_SCRIPT, REPO
from kimi_dflash.bench import client
from kimi_dflash.bench.records import CLIENT_OUT_OF_RESOURCES, CONNECTION_ERROR
from kimi_dflash.bench.result import load_result
from synthetic_server import running

FAST = ["--ttft-ms", "5", "--chunk-interval-ms", "1"]
SMALL = ["--max-tokens", "4", "--warmup", "0", "--progress-interval", "0"]

# Runs the benchmark with RLIMIT_NOFILE set to (SOFT, HARD); with SPARE > 0, after the benchmark's own checks
# (as its event loop starts) it also fills the table with /dev/null until only SPARE descriptors are left: a
# shortage that starts mid-run.
WRAPPER = """
import os, resource, runpy, sys
sys.path.insert(0, {src!r})
from kimi_dflash.bench import eventloop
soft, hard, spare = (int(v) for v in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
if spare:
    real = eventloop.run
    def run(*args, **kwargs):
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        while len(os.listdir("/proc/self/fd")) < limit - spare:
            os.open(os.devnull, os.O_RDONLY)
        return real(*args, **kwargs)
    eventloop.run = run
sys.argv = [{script!r}, *sys.argv[4:]]
runpy.run_path({script!r}, run_name="__main__")
"""


def _limited(tmp_path: Path, soft: int, hard: int, spare: int, *args: str) -> subprocess.CompletedProcess[str]:
    wrapper = tmp_path / "limited.py"
    wrapper.write_text(WRAPPER.format(src=str(REPO / "src"), script=str(BENCH_SCRIPT)))
    return subprocess.run(
        [sys.executable, str(wrapper), str(soft), str(hard), str(spare), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_more_sessions_than_the_hard_limit_allows_are_refused_with_the_numbers(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = _limited(tmp_path, 200, 200, 0, "--base-url", "http://127.0.0.1:9", "--sessions", "8,400",
                    "--output", str(out), *SMALL)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "--sessions 400 needs about 464 file descriptors" in proc.stderr
    assert "may open 200 (hard limit 200)" in proc.stderr and "ulimit -n 464" in proc.stderr
    assert "cannot reach the server" not in proc.stderr and "Traceback" not in proc.stderr  # refused first
    assert not out.exists()


def test_open_loop_in_flight_counts_too(tmp_path: Path) -> None:
    proc = _limited(tmp_path, 200, 200, 0, "--base-url", "http://127.0.0.1:9", "--request-rate", "inf",
                    "--num-sessions", "300", "--output", str(tmp_path / "o.json"), *SMALL)  # fmt: skip
    assert proc.returncode == 2 and "--num-sessions 300 needs about 364 file descriptors" in proc.stderr


def test_the_soft_limit_is_raised_when_the_hard_limit_allows(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    with running(FAST) as url:
        proc = _limited(tmp_path, 100, 1000, 0, "--base-url", url, "--sessions", "120", "--turns-per-session", "1",
                        "--output", str(out), *SMALL)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "raised this process's open-file limit from 100 to 184" in proc.stderr
    assert load_result(out).results[0].completed == 120


@pytest.mark.parametrize("loop", ["closed", "open"])
def test_a_shortage_mid_run_blames_the_client_and_keeps_the_finished_level(tmp_path: Path, loop: str) -> None:
    out = tmp_path / "out.json"
    load = (
        ["--sessions", "2,60"]
        if loop == "closed"
        else ["--request-rate", "1000,inf", "--num-sessions", "60", "--max-concurrency", "60"]
    )
    # 40 spare descriptors: level 1 (2 sessions; open loop: 60 conversations arriving over 60 ms) may fit;
    # 60 at once cannot
    with running(FAST) as url:
        proc = _limited(tmp_path, 1024, 1024, 40, "--base-url", url, *load, "--turns-per-session", "2",
                        "--output", str(out), *SMALL)  # fmt: skip
    assert proc.returncode == 5, proc.stderr
    assert "server stopped answering" not in proc.stderr and "Traceback" not in proc.stderr
    result = load_result(out)
    assert result.run.status == "failed" and result.run.exit_code == 5
    assert "the client ran out of a local resource" in (result.run.status_detail or "")
    assert "Too many open files" in (result.run.status_detail or "")
    last = result.results[-1]
    assert last.partial and CLIENT_OUT_OF_RESOURCES in last.failures
    if loop == "closed":  # the finished level is in the file, whole
        first = result.results[0]
        assert first.sessions == 2 and not first.partial and first.completed == 4


def test_local_shortages_are_classified_as_the_clients() -> None:
    for code in (errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL):
        assert client.classify_exception(OSError(code, "x"))[0] == CLIENT_OUT_OF_RESOURCES
    key = ConnectionKey("127.0.0.1", 8000, False, True, None, None, None)
    wrapped = aiohttp.ClientConnectorError(key, OSError(errno.EMFILE, "Too many open files"))
    assert client.classify_exception(wrapped)[0] == CLIENT_OUT_OF_RESOURCES
    assert client.classify_exception(OSError(errno.EHOSTUNREACH, "x"))[0] == CONNECTION_ERROR
