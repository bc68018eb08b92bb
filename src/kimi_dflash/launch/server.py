"""Run the vLLM server process: foreground supervision with clean shutdown, or detached start + readiness wait."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.plan import LaunchPlan

STOP_GRACE_S = 30.0
POLL_INTERVAL_S = 1.0
PROGRESS_INTERVAL_S = 10.0


@dataclass(frozen=True)
class Readiness:
    ready: bool
    detail: str


def _request(
    url: str, api_key: str | None, body: dict[str, object] | None = None, timeout: float = 10.0
) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def probe_ready(plan: LaunchPlan, api_key: str | None) -> Readiness:
    """Ready = /health answers 200 and a one-token completion succeeds (the engine really serves)."""
    try:
        status, _ = _request(f"{plan.base_url}/health", api_key, timeout=5)
        if status != 200:
            return Readiness(False, f"/health answered {status}")
        status, body = _request(
            f"{plan.base_url}/v1/completions",
            api_key,
            {"model": plan.served_model_name, "prompt": "Hello", "max_tokens": 1, "temperature": 0},
            timeout=120,
        )
    except (OSError, urllib.error.URLError) as exc:
        return Readiness(False, f"not answering yet ({getattr(exc, 'reason', exc)})")
    if status != 200:
        return Readiness(False, f"/v1/completions answered {status}: {body[:200].decode(errors='replace')}")
    return Readiness(True, "ok")


def tail(path: Path, lines: int = 40) -> str:
    try:
        with path.open("rb") as handle:
            return b"".join(deque(handle, maxlen=lines)).decode(errors="replace")
    except OSError:
        return "(no log)"


def _last_line(path: Path) -> str:
    text = tail(path, 5).strip().splitlines()
    return text[-1][:160] if text else ""


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> int:
    """SIGTERM the server's whole process group (vLLM's workers included), SIGKILL what is left after grace_s."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    # Stragglers (e.g. a worker that ignored SIGTERM) die with the group.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return process.wait()


def _child_env(plan: LaunchPlan) -> dict[str, str]:
    env = dict(os.environ)
    env.update(plan.env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _pump(source, sinks: list) -> None:  # type: ignore[no-untyped-def]
    for chunk in iter(lambda: source.readline(), b""):
        for sink in sinks:
            sink.write(chunk)
            sink.flush()


def run_foreground(plan: LaunchPlan, log_path: Path | None) -> int:
    """Run vLLM until it exits or we get SIGINT/SIGTERM; stop it cleanly and return its exit code."""
    log_handle = log_path.open("ab") if log_path else None
    process = subprocess.Popen(
        plan.argv,
        env=_child_env(plan),
        start_new_session=True,
        stdout=subprocess.PIPE if log_handle else None,
        stderr=subprocess.STDOUT if log_handle else None,
    )
    pump = None
    if log_handle is not None:
        pump = threading.Thread(target=_pump, args=(process.stdout, [sys.stdout.buffer, log_handle]), daemon=True)
        pump.start()

    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if not stopping.is_set():
            stopping.set()
            print(
                f"\nserve: got {signal.Signals(signum).name}, stopping vLLM (pid {process.pid})...",
                file=sys.stderr,
                flush=True,
            )

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        while process.poll() is None and not stopping.is_set():
            time.sleep(0.2)
        code = stop_process_group(process)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pump is not None:
            pump.join(timeout=5)
        if log_handle is not None:
            log_handle.close()
    if stopping.is_set():
        # A requested stop is a success unless vLLM itself failed while stopping.
        return 0 if code in (0, -signal.SIGTERM, -signal.SIGKILL) else code
    return code


def start_detached(plan: LaunchPlan, log_path: Path, pid_path: Path) -> subprocess.Popen[bytes]:
    """Start vLLM in its own session writing to log_path; it outlives this process."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pid_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log_handle:
        process = subprocess.Popen(
            plan.argv,
            env=_child_env(plan),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=log_handle,
            stderr=subprocess.STDOUT,
        )
    write_text_atomic(pid_path, f"{process.pid}\n")
    return process


def wait_until_ready(
    plan: LaunchPlan,
    process: subprocess.Popen[bytes],
    log_path: Path,
    timeout_s: float,
    api_key: str | None,
    say: Callable[[str], None],
) -> bool:
    """Poll until ready, the process dies (log tail shown) or the timeout passes. Shows progress meanwhile."""
    started = time.monotonic()
    next_progress = started + PROGRESS_INTERVAL_S
    while True:
        elapsed = time.monotonic() - started
        code = process.poll()
        if code is not None:
            say(
                f"serve: vLLM exited with code {code} after {elapsed:.0f} s. Last lines of {log_path}:\n"
                f"{tail(log_path)}"
            )
            return False
        state = probe_ready(plan, api_key)
        if state.ready:
            say(f"serve: ready after {elapsed:.1f} s at {plan.base_url} (model {plan.served_model_name})")
            return True
        if elapsed > timeout_s:
            say(
                f"serve: not ready after {timeout_s:.0f} s ({state.detail}). Last lines of {log_path}:\n"
                f"{tail(log_path)}"
            )
            return False
        if time.monotonic() >= next_progress:
            next_progress += PROGRESS_INTERVAL_S
            say(f"serve: waiting ({elapsed:.0f} s): {state.detail}; log: {_last_line(log_path)}")
        time.sleep(POLL_INTERVAL_S)


def start_and_wait(
    plan: LaunchPlan,
    log_path: Path,
    pid_path: Path,
    timeout_s: float,
    api_key: str | None,
    say: Callable[[str], None],
) -> subprocess.Popen[bytes] | None:
    """Start vLLM detached with a fresh log and wait until it serves. None when it died or timed out: it is then
    stopped (workers included), its pid file removed, and the log tail was shown."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")  # a fresh log per start, so the tail shown on failure is this run's
    process = start_detached(plan, log_path, pid_path)
    say(f"serve: vLLM pid {process.pid} for {plan.served_model_name} on {plan.base_url}, log {log_path}")
    if wait_until_ready(plan, process, log_path, timeout_s, api_key, say):
        return process
    stop_process_group(process)
    pid_path.unlink(missing_ok=True)
    return None


def read_pid(pid_path: Path) -> int | None:
    try:
        return int(pid_path.read_text().strip())
    except (OSError, ValueError):
        return None


def stop_detached(pid_path: Path, grace_s: float = STOP_GRACE_S) -> str:
    """Stop a server started with --wait (its whole process group). Returns what happened."""
    pid = read_pid(pid_path)
    if pid is None:
        return f"no server recorded in {pid_path}"
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_path.unlink(missing_ok=True)
        return f"server {pid} was not running"
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    pid_path.unlink(missing_ok=True)
    return f"stopped server {pid}"
