"""Fault injection: a misbehaving server never crashes the benchmark; every failure is counted by reason
and every finished request is kept. The synthetic server cycles through --faults, one per request."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench_helpers import BENCH_SCRIPT, bench_in_process, run_benchmark, synthetic_stats
from kimi_dflash.bench.result import load_result
from kimi_dflash.core import options
from synthetic_server import running

FAST = ["--ttft-ms", "20", "--chunk-interval-ms", "5"]


def bench(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return bench_in_process("--base-url", url, "--output", str(out), "--warmup", "0", *extra)


def test_every_fault_is_counted_and_good_requests_are_kept(tmp_path: Path) -> None:
    faults = [
        "ok", "http_500", "ok", "http_429", "reset", "eof", "truncate", "malformed", "error_event",
        "comments", "coalesce", "split", "crlf", "no_usage",
    ]  # fmt: skip
    out = tmp_path / "faults.json"
    # 2 sessions x 7 turns = 14 requests = one pass over the fault list, whatever the interleaving
    with running([*FAST, "--chunk-tokens", "2", "--faults", ",".join(faults)]) as url:
        proc = bench(url, out, "--sessions", "2", "--turns-per-session", "7", "--max-tokens", "12")
    assert proc.returncode == 0, proc.stderr
    level = load_result(out).results[0]
    assert level.failures == {
        "connection_closed": 1,  # eof: the connection closed inside the chunked body
        "connection_reset": 1,
        "http_429": 1,
        "http_500": 1,
        "malformed_sse": 1,
        "server_error_event": 1,
        "truncated_stream": 1,
    }
    assert level.failed == 7 and level.completed == 7 and level.requests == 14
    # ok x2, comments, coalesce, split, crlf count 12 tokens each from usage; no_usage falls back to
    # counting chunks (6 chunks of 2 tokens) and is flagged
    assert level.tokens_counted_from_chunks == 1
    assert level.output_tokens == 6 * 12 + 6
    assert "HTTP 429" in level.failure_examples["http_429"]
    assert "WARNING" in proc.stdout and "no usage" in proc.stdout


@pytest.mark.realtime
def test_timeouts_on_a_stalled_stream_and_a_silent_server(tmp_path: Path) -> None:
    out = tmp_path / "timeout.json"
    with running([*FAST, "--faults", "stall,hang,ok"]) as url:
        started = time.monotonic()
        proc = bench(url, out, "--sessions", "1", "--turns-per-session", "3", "--max-tokens", "6", "--timeout", "1")
        elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    level = load_result(out).results[0]
    assert level.failures == {"timeout": 2} and level.completed == 1
    assert elapsed < 30


def test_connection_refused_at_start_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    out = tmp_path / "never.json"
    proc = bench(f"http://127.0.0.1:{port}", out, "--sessions", "2")
    assert proc.returncode == 2
    assert "cannot reach the server" in proc.stderr and "connection refused" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_server_dying_mid_run_aborts_with_partial_results(tmp_path: Path) -> None:
    out = tmp_path / "died.json"
    with running([*FAST, "--faults", "ok,ok,ok,die"]) as url:
        proc = bench(url, out, "--sessions", "1,4", "--turns-per-session", "8", "--max-tokens", "6")
    assert proc.returncode == 3, proc.stderr
    doc = load_result(out)
    assert doc.run.status == "aborted" and "server stopped answering" in (doc.run.status_detail or "")
    assert len(doc.results) == 1  # the second level never started
    level = doc.results[0]
    assert level.partial is True
    assert level.completed == 3 and level.output_tokens == 18  # every finished request kept
    assert level.failures.get("connection_closed", 0) + level.failures.get("connection_reset", 0) >= 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_interrupt_writes_partial_results(tmp_path: Path, signum: int, code: int) -> None:
    out = tmp_path / "interrupted.json"
    with running(["--ttft-ms", "50", "--chunk-interval-ms", "20"]) as url:
        cmd = [sys.executable, str(BENCH_SCRIPT), "--base-url", url, "--output", str(out), "--warmup", "0",
               "--sessions", "2", "--turns-per-session", "30", "--max-tokens", "10"]  # fmt: skip
        process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # wait until a few requests have finished
                if synthetic_stats(url)["requests"] >= 5:
                    break
                time.sleep(0.1)
            os.kill(process.pid, signum)
            _, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == code, stderr
    doc = load_result(out)
    assert doc.run.status == "interrupted"
    level = doc.results[0]
    assert level.partial is True and level.completed >= 3
    assert level.failed == 0  # cancelled in-flight requests are not failures ...
    assert level.cancelled is not None and level.cancelled >= 1  # ... they are counted separately
    assert level.output_tokens == 10 * level.completed


def test_api_key_is_sent_but_never_shown_or_stored(tmp_path: Path) -> None:
    """Real processes: "never shown" covers whatever reaches the process's stdout and stderr."""
    secret = "sk-test-0123456789"
    common = ("--sessions", "1", "--turns-per-session", "1", "--max-tokens", "4")
    with running([*FAST, "--api-key", secret]) as url:
        denied = bench(url, tmp_path / "denied.json", *common)
        out = tmp_path / "ok.json"
        allowed = run_benchmark("--base-url", url, "--output", str(out), "--warmup", "0", *common, "--api-key", secret)
        env_out = str(tmp_path / "env.json")
        env_run = run_benchmark(
            "--base-url", url, "--output", env_out, "--warmup", "0", *common, env={"OPENAI_API_KEY": secret}
        )
    assert denied.returncode == 2 and "401" in denied.stderr and "--api-key" in denied.stderr
    assert allowed.returncode == 0, allowed.stderr
    assert env_run.returncode == 0, env_run.stderr
    assert load_result(out).results[0].completed == 1
    for text in (allowed.stdout, allowed.stderr, out.read_text(), env_run.stdout, env_run.stderr):
        assert secret not in text
    assert "***" in out.read_text()  # the stored command line shows where the key was


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sessions", "0"], "positive integers"),
        (["--sessions", "8,x"], "positive integers"),
        (["--max-tokens", "0"], "--max-tokens must be >= 1"),
        (["--dataset", "/nonexistent.jsonl"], "no such file"),
        (["--base-url", "localhost:8000"], "must start with http"),
    ],
)
def test_bad_arguments_name_the_problem(tmp_path: Path, args: list[str], message: str) -> None:
    if "--base-url" in args:
        proc = bench_in_process(*args)
    else:
        proc = bench("http://127.0.0.1:9", tmp_path / "x.json", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-tokens", "99999999999999999999"], "--max-tokens must be <= 1048576"),
        (["--warmup", "100000000"], "--warmup must be <= 10000"),  # its requests were drawn at once
        (["--shared-prefix-tokens", "2000000000"], "--shared-prefix-tokens must be <= 1048576"),  # built whole
    ],
)
def test_sizes_a_typo_could_make_huge_are_bounded(args: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        options.parse("kimi_dflash.bench.cli", args, prog="bench")
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_unknown_model_is_refused(tmp_path: Path) -> None:
    with running(FAST) as url:
        proc = bench(url, tmp_path / "x.json", "--model", "nope", "--sessions", "1")
    assert proc.returncode == 2 and "not served" in proc.stderr and "synthetic" in proc.stderr
