"""Run the vLLM server process: foreground supervision with clean shutdown, or detached start + readiness wait."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kimi_dflash.core import http
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.user_files import UnreadableFile, read_user_text
from kimi_dflash.launch import ownership, private_files
from kimi_dflash.plan import LaunchPlan

STOP_GRACE_S = 30.0
POLL_INTERVAL_S = 0.25  # a refused connection costs nothing; a 1 s poll added ~0.5 s to every ready time
PROGRESS_INTERVAL_S = 10.0
MAX_RECORD_BYTES = 4096  # a record is ~130 bytes; anything larger is not one


def _answer(plan: LaunchPlan, path: str, **request: object) -> str | None:
    """None when ``path`` answers 200; else what it did."""
    try:
        reply = http.request(f"{plan.base_url}{path}", **request)  # type: ignore[arg-type]
    except OSError as exc:
        return f"not answering yet ({getattr(exc, 'reason', exc)})"
    shown = reply.body[:200].decode(errors="replace")
    return None if reply.status == 200 else f"{path} answered {reply.status}: {shown}"


def tail(path: Path, lines: int = 40, start: int = 0) -> str:
    """The last ``lines`` lines of ``path`` from byte ``start`` on (a log appended to by several starts)."""
    try:
        with path.open("rb") as handle:
            handle.seek(start)
            return b"".join(deque(handle, maxlen=lines)).decode(errors="replace")
    except OSError:
        return "(no log)"


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> int:
    """SIGTERM the server's process group, SIGKILL the rest after grace_s; then its family outside it, and residue."""
    env = ownership.environ_of(process.pid) if process.poll() is None else None
    token = (env or {}).get(ownership.TOKEN_VAR)
    members = ownership.family(token) if token else [process.pid]
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
    code = process.wait()
    if token:
        members += ownership.terminate(ownership.family(token), token, grace_s=5.0)
    ownership.remove_kmp_residue(sorted(set(members)))
    return code


def _child_env(plan: LaunchPlan, token: str | None = None) -> dict[str, str]:
    """The plan's environment over ours, plus the ownership token every vLLM process inherits (see ownership)."""
    env = dict(os.environ)
    env.update(plan.env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[ownership.TOKEN_VAR] = token or ownership.new_token()
    env[ownership.PORT_VAR] = str(plan.port)
    env.update(ownership.KEEP_ENVIRON)
    return env


def _pump(source, sinks: list) -> None:  # type: ignore[no-untyped-def]
    for chunk in iter(lambda: source.readline(), b""):
        for sink in sinks:
            sink.write(chunk)
            sink.flush()


def run_foreground(plan: LaunchPlan, log_path: Path | None) -> int:
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
            name = signal.Signals(signum).name
            print(f"\nserve: got {name}, stopping vLLM (pid {process.pid})...", file=sys.stderr, flush=True)

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


def _open_log(log_path: Path, private: bool) -> BinaryIO:
    """``private``: the launcher's default log, never opened through a symlink; a user's log is opened as named."""
    if private:
        return os.fdopen(private_files.open_private(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    return log_path.open("ab")


def start_detached(
    plan: LaunchPlan, log_path: Path, pid_path: Path, token: str, *, private_log: bool = False
) -> subprocess.Popen[bytes]:
    """In its own session (it outlives us); the pid file gets the ownership record that --stop checks."""
    pid_path.parent.mkdir(parents=True, exist_ok=True)
    with _open_log(log_path, private_log) as log_handle:
        process = subprocess.Popen(
            plan.argv,
            env=_child_env(plan, token),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=log_handle,
            stderr=subprocess.STDOUT,
        )
    ticks = ownership.start_ticks(process.pid)
    record = ownership.ServerRecord(process.pid, ticks if ticks is not None else 0, token, plan.port)
    write_text_atomic(pid_path, record.to_json() + "\n", mode=private_files.PRIVATE_FILE_MODE)
    return process


def wait_until_ready(
    plan: LaunchPlan,
    process: subprocess.Popen[bytes],
    log_path: Path,
    timeout_s: float,
    api_key: str | None,
    say: Callable[[str], None],
    log_start: int = 0,
    token: str | None = None,
) -> bool:
    """Poll until ready, the process dies (log tail shown) or the timeout passes. ``log_start``: where this start's
    output begins in the appended log. With ``token``, ready also means every socket listening on the port is held
    by a process carrying it (another server answering there is not this start's), and only then is the key sent."""
    started = time.monotonic()
    next_progress = started + PROGRESS_INTERVAL_S

    def last_lines() -> str:
        return f"Last lines of {log_path}:\n{tail(log_path, start=log_start)}"

    while True:
        elapsed = time.monotonic() - started
        if (code := process.poll()) is not None:
            say(f"serve: vLLM exited with code {code} after {elapsed:.0f} s. {last_lines()}")
            return False
        detail = _answer(plan, "/health", timeout_s=5)  # without the key: whoever answers may not be ours
        other = ownership.others_listening(plan.port, token) if detail is None and token is not None else None
        if other is not None:
            say(
                f"serve: port {plan.port} is answered by another server ({other}), not by the vLLM this start "
                f"launched (pid {process.pid}); stopping what was started. Pick another port (PORT=...), or stop "
                f"what listens there (ss -ltnp 'sport = :{plan.port}' names it)."
            )
            return False
        if detail is None:  # every listener is this start's: the key may go, with a one-token completion
            body = {"model": plan.served_model_name, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
            detail = _answer(plan, "/v1/completions", body=body, api_key=api_key, timeout_s=120)
        if detail is None:
            say(f"serve: ready after {elapsed:.1f} s at {plan.base_url} (model {plan.served_model_name})")
            return True
        if elapsed > timeout_s:
            say(f"serve: not ready after {timeout_s:.0f} s ({detail}). {last_lines()}")
            return False
        if time.monotonic() >= next_progress:
            next_progress += PROGRESS_INTERVAL_S
            last = (tail(log_path, 5, log_start).strip().splitlines() or [""])[-1][:160]
            say(f"serve: waiting ({elapsed:.0f} s): {detail}; log: {last}")
        time.sleep(POLL_INTERVAL_S)


class StartInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM/SIGHUP) during a --wait start: what was starting has been stopped."""


def _raise_interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def start_and_wait(
    plan: LaunchPlan,
    log_path: Path,
    pid_path: Path,
    timeout_s: float,
    api_key: str | None,
    say: Callable[[str], None],
    *,
    private_log: bool = False,
) -> subprocess.Popen[bytes] | None:
    """None when it died or timed out: then stopped (workers included), pid file removed, log tail shown. A signal while
    it starts stops it too and raises StartInterrupted: nothing is left running that nobody was told about."""
    try:
        log_start = log_path.stat().st_size  # the log is appended to; the tail shown on failure is this start's
    except OSError:
        log_start = 0
    on_main_thread = threading.current_thread() is threading.main_thread()
    signals = (signal.SIGTERM, signal.SIGHUP) if on_main_thread else ()
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in signals}
    process = None
    ignoring_sigint = False
    try:
        token = ownership.new_token()
        process = start_detached(plan, log_path, pid_path, token, private_log=private_log)
        say(f"serve: vLLM pid {process.pid} for {plan.served_model_name} on {plan.base_url}, log {log_path}")
        ready = wait_until_ready(plan, process, log_path, timeout_s, api_key, say, log_start, token)
    except KeyboardInterrupt as interrupt:
        if on_main_thread:  # a second Ctrl-C must not leave a half-stopped server behind
            ignoring_sigint = signal.signal(signal.SIGINT, signal.SIG_IGN) is not signal.SIG_IGN
        what = str(interrupt) or "SIGINT"
        if process is not None:
            say(f"\nserve: interrupted ({what}) while vLLM was starting; stopping it (pid {process.pid})...")
            stop_process_group(process)
            pid_path.unlink(missing_ok=True)
            say(f"serve: stopped vLLM (pid {process.pid}) and its workers; nothing is left running.")
        else:
            say(f"\nserve: interrupted ({what}) before vLLM started; nothing is running.")
        raise StartInterrupted(what) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if ignoring_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if ready:
        return process
    stop_process_group(process)
    pid_path.unlink(missing_ok=True)
    return None


@dataclass(frozen=True)
class StopOutcome:
    ok: bool  # False: refused (nothing was signalled)
    message: str


def read_record(pid_path: Path) -> ownership.ServerRecord | None:
    """The ownership record in ``pid_path``; None when there is no file. PidFileError when it is not ours: not a
    small regular UTF-8 file (a FIFO would block, a symlink points at what someone else chose), or not a record."""
    try:
        text = read_user_text(pid_path, what="pid file", max_bytes=MAX_RECORD_BYTES, follow_symlinks=False)
    except UnreadableFile as error:
        if not os.path.lexists(pid_path):
            return None
        # "pid file PATH: is a FIFO (named pipe); name a regular file" -> "is a FIFO (named pipe)"
        reason = str(error).removeprefix(f"pid file {pid_path}: ").partition(";")[0]
        raise ownership.PidFileError(reason) from None
    return ownership.parse_record(text)


def running_server(pid_path: Path) -> ownership.ServerRecord | None:
    """The recorded server when it is alive and provably ours; None otherwise (PidFileError passes through)."""
    record = read_record(pid_path)
    return record if record is not None and ownership.is_ours(record) else None


def stop_orphans(port: int, say: Callable[[str], None], grace_s: float = 10.0) -> list[int]:
    """Stop what servers this project started on ``port`` left behind (they carry its token), and their residue."""
    stopped: list[int] = []
    dead_leaders: set[int] = set()  # the API servers that died: their residue is ours too
    for token, pids in ownership.orphans_on_port(port).items():
        say(f"serve: stopping {len(pids)} leftover vLLM process(es) of an earlier server on port {port}: {pids}")
        dead_leaders |= {sid for sid in map(ownership.session_of, pids) if sid is not None and sid not in pids}
        stopped += ownership.terminate(pids, token, grace_s)
    ownership.remove_kmp_residue(sorted(set(stopped) | dead_leaders))
    return stopped


def stop_detached(
    pid_path: Path, grace_s: float = STOP_GRACE_S, say: Callable[[str], None] = lambda _: None
) -> StopOutcome:
    """Stop a --wait server only when its pid file's process is provably ours (start time, token); then its family."""
    try:
        record = read_record(pid_path)
    except ownership.PidFileError as error:
        return StopOutcome(
            False,
            f"refusing to signal anything: the pid file {pid_path} is not a server record ({error}). "
            f"Nothing was stopped; remove the file once you are sure no server of yours runs.",
        )
    if record is None:
        digits = pid_path.stem.rpartition("-")[2]  # serve-<port>.pid
        stopped = stop_orphans(int(digits) if digits.isdigit() else -1, say)
        extra = f"; stopped {len(stopped)} leftover vLLM process(es)" if stopped else ""
        return StopOutcome(True, f"no server recorded in {pid_path}{extra}")
    if not ownership.is_ours(record):
        pid_path.unlink(missing_ok=True)
        left = stop_orphans(record.port, say)
        ownership.remove_kmp_residue([record.pid])  # the recorded server died (e.g. SIGKILL): its residue
        if left:
            return StopOutcome(True, f"server {record.pid} was not running; stopped {len(left)} leftover process(es)")
        return StopOutcome(True, f"server {record.pid} was not running (stale pid file removed; nothing signalled)")
    members = ownership.family(record.token)
    # SIGTERM the API server first: vLLM then shuts its engine and workers down itself.
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and ownership.is_ours(record):
        time.sleep(0.2)
    members += ownership.terminate(ownership.family(record.token), record.token, grace_s=5.0)
    pid_path.unlink(missing_ok=True)
    ownership.remove_kmp_residue(sorted(set(members)))
    return StopOutcome(True, f"stopped server {record.pid} ({len(set(members))} process(es))")
