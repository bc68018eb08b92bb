"""Which processes are the vLLM server this project started, so that nothing else is ever signalled: a detached
start records pid, start time and a token every child inherits, read from /proc (docs/lifecycle.md; Linux only)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.launch import private_files

TOKEN_VAR = "KIMI_DFLASH_SERVER_TOKEN"
PORT_VAR = "KIMI_DFLASH_SERVER_PORT"
# vLLM's setproctitle ("VLLM::EngineCore") would by default overwrite the /proc/<pid>/environ memory, and the token
# with it, in exactly the processes that get orphaned; SPT_NOENV (its documented switch) leaves the environment be.
KEEP_ENVIRON = {"SPT_NOENV": "1"}
PROC = Path("/proc")
SHM = Path("/dev/shm")
KMP_PREFIX = "__KMP_REGISTERED_LIB_"  # Intel OpenMP (libiomp5) registers each process here and never cleans up


class PidFileError(ValueError):
    """The pid file's content is not a record this project wrote (the message says what and how to fix it)."""


@dataclass(frozen=True)
class ServerRecord:
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: start time in clock ticks since boot
    token: str
    port: int

    def to_json(self) -> str:
        return json.dumps({"pid": self.pid, "start_ticks": self.start_ticks, "token": self.token, "port": self.port})


def new_token() -> str:
    return secrets.token_hex(16)


def pid_max(proc: Path = PROC) -> int:
    try:
        return int((proc / "sys/kernel/pid_max").read_text().strip())
    except (OSError, ValueError):
        return 4_194_304  # the kernel's upper limit


def parse_record(text: str, proc: Path = PROC) -> ServerRecord:
    """The record in a pid file; PidFileError for anything this project did not write (bare pids included)."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, int) or (isinstance(text, str) and text.strip().lstrip("-").isdigit()):
        # An older serve.sh wrote a bare pid: there is no token to prove the process is ours.
        raise PidFileError(
            f"it holds a bare pid ({text.strip()[:40]}) without the ownership record this serve.sh writes, so "
            "nothing can prove that process is the server; check it yourself (ps -fp PID) and stop it with kill"
        )
    if not isinstance(data, dict):
        raise PidFileError(f"unreadable content {text.strip()[:40]!r}")
    try:
        pid, ticks, token, port = data["pid"], data["start_ticks"], data["token"], data["port"]
    except KeyError as missing:
        raise PidFileError(f"the record lacks {missing}") from None
    # bool is an int in Python; 0 and negatives would make kill() signal process groups, not one process.
    if isinstance(pid, bool) or not isinstance(pid, int) or not 1 < pid <= pid_max(proc):
        raise PidFileError(f"pid {pid!r} is not a valid process id (2..{pid_max(proc)})")
    if not (isinstance(ticks, int) and ticks >= 0 and isinstance(token, str) and len(token) >= 16):
        raise PidFileError("the record's start time or token is malformed")
    if not (isinstance(port, int) and 0 < port < 65536):
        raise PidFileError(f"the record's port {port!r} is invalid")
    return ServerRecord(pid, ticks, token, port)


def _stat(pid: int, proc: Path = PROC) -> list[str]:
    """/proc/<pid>/stat from field 3 on ([]: no such process); the name (field 2) may hold ")", so split at the last."""
    try:
        return (proc / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return []


def _stat_number(pid: int, field: int, proc: Path) -> int | None:
    fields = _stat(pid, proc)
    try:
        return int(fields[field - 3])
    except (IndexError, ValueError):
        return None


def start_ticks(pid: int, proc: Path = PROC) -> int | None:
    """Start time of ``pid`` (clock ticks since boot), None when there is no such process."""
    return _stat_number(pid, 22, proc)


def environ_of(pid: int, proc: Path = PROC) -> dict[str, str] | None:
    """The environment ``pid`` started with, None when unreadable (gone, or another user's process)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    entries = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {key: value for key, _, value in entries}


def session_of(pid: int, proc: Path = PROC) -> int | None:
    return _stat_number(pid, 6, proc)


def _token_of(pid: int, proc: Path = PROC) -> str | None:
    return (environ_of(pid, proc) or {}).get(TOKEN_VAR)


def _processes(proc: Path) -> list[int]:
    return sorted(int(entry.name) for entry in proc.iterdir() if entry.name.isdigit())


def is_ours(record: ServerRecord, proc: Path = PROC) -> bool:
    """The recorded pid is alive, started when recorded, and carries the recorded token."""
    pid = record.pid
    return start_ticks(pid, proc) == record.start_ticks and alive(pid, proc) and _token_of(pid, proc) == record.token


def family(token: str, proc: Path = PROC) -> list[int]:
    """Every live process that carries ``token`` (the server and all it spawned, orphans included)."""
    return [pid for pid in _processes(proc) if pid != os.getpid() and _token_of(pid, proc) == token]


def orphans_on_port(port: int, proc: Path = PROC) -> dict[str, list[int]]:
    """token -> pids of servers this project started on ``port`` whose API server (session leader) is gone."""
    by_token: dict[str, list[int]] = {}
    for pid in _processes(proc):
        env = environ_of(pid, proc) or {}
        if TOKEN_VAR in env and env.get(PORT_VAR) == str(port):
            by_token.setdefault(env[TOKEN_VAR], []).append(pid)
    orphans = {}
    for token, pids in by_token.items():
        leaders = {session_of(pid, proc) for pid in pids} - {None}
        if not any(_token_of(leader, proc) == token for leader in leaders):
            orphans[token] = pids
    return orphans


TCP_TABLES = ("net/tcp", "net/tcp6")
TCP_LISTEN = "0A"  # the kernel's TCP_LISTEN state, as /proc/net/tcp writes it


def listening_sockets(port: int, proc: Path = PROC) -> set[int]:
    """Inodes of the sockets listening on TCP ``port`` at any address, IPv4 or IPv6 (this network namespace)."""
    inodes = set()
    for table in TCP_TABLES:
        try:
            rows = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            # sl local_address(hex ip:hex port) rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
            fields = row.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN and int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


def socket_holders(inodes: set[int], pids: list[int], proc: Path = PROC) -> dict[int, int]:
    """inode -> the first of ``pids`` that holds that socket open (its /proc/<pid>/fd; unreadable ones skipped)."""
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    held: dict[int, int] = {}
    for pid in pids:
        try:
            fds = list((proc / str(pid) / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                inode = wanted.get(os.readlink(fd))
            except OSError:
                continue
            if inode is not None:
                held.setdefault(inode, pid)
    return held


def others_listening(port: int, token: str, proc: Path = PROC) -> str | None:
    """Who else listens on ``port`` (for a message); None: only ``token``'s server (nobody counts as someone)."""
    if not (inodes := listening_sockets(port, proc)):
        return f"no process of this machine listens on port {port}"
    if not (foreign := inodes - socket_holders(inodes, family(token, proc), proc).keys()):
        return None
    pids = sorted(set(socket_holders(foreign, _processes(proc), proc).values()))
    return f"pid {', '.join(map(str, pids))}" if pids else "a process of another user"


def alive(pid: int, proc: Path = PROC) -> bool:
    """Running (a zombie has exited: it only waits for its parent to collect the exit code)."""
    fields = _stat(pid, proc)
    return bool(fields) and fields[0] not in ("Z", "X")


def terminate(pids: list[int], token: str, grace_s: float, proc: Path = PROC) -> list[int]:
    """SIGTERM each pid still carrying ``token`` (re-checked right before), SIGKILL the rest after ``grace_s``."""
    signalled = []
    for pid in pids:
        if _token_of(pid, proc) == token:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
                signalled.append(pid)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(pid) for pid in signalled):
        time.sleep(0.2)
    for pid in signalled:
        if _token_of(pid, proc) == token:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(pid) for pid in signalled):
        time.sleep(0.1)
    return signalled


def remove_kmp_residue(pids: list[int], shm: Path = SHM) -> list[Path]:
    """Remove /dev/shm/__KMP_REGISTERED_LIB_<pid>_* (Intel OpenMP) of stopped ``pids``; a reused pid keeps its own."""
    removed = []
    for pid in pids:
        if alive(pid):
            continue
        for path in shm.glob(f"{KMP_PREFIX}{pid}_*"):
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


class StartInProgress(RuntimeError):
    """Another serve.sh holds the port's lock (it is starting or stopping a server on that port)."""


@contextlib.contextmanager
def port_lock(lock_path: Path) -> Iterator[None]:
    """Around check-then-start (and stop) for one port, freed by the kernel however the holder exits; else
    StartInProgress. The caller has checked the directory (private_dir)."""
    fd = private_files.open_private(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StartInProgress(str(lock_path)) from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
