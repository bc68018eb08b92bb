"""The one place a workflow starts and stops a config's server (``serve.sh CONFIG --wait``, then ``--stop``); the
server up now is named in ``running.json``, so a rerun after a hard kill or a refused stop stops it first."""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.config.schema import KEY
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.user_files import MiB, read_log_tail
from kimi_dflash.documents import Document

LOG_TAIL_LINES = 40
RECORD_FILE = "running.json"
# What serve.sh runs, in this interpreter: works from a checkout and from an installed wheel alike.
SERVE_COMMAND = (sys.executable, "-m", "kimi_dflash.launch.cli")
Say = Callable[[str], None]


class ServerLeftRunning(Exception):
    """`serve.sh --stop` failed: the server may still be up, so the run stops here, naming it and how to stop it; the
    record keeps naming it, so a rerun first tries to stop it again."""

    def __init__(self, port: int, command: str, detail: str) -> None:
        super().__init__(
            f"the server on port {port} may still be running: its stop failed ({detail}). Stop it with: {command}"
        )


class RunningServer(Document):
    """``running.json``: the server a run has up right now."""

    SCHEMA = "kimi-dflash/running-server"
    WHAT = "running-server record"
    MAX_BYTES = 1 << 20
    point: str
    port: int
    env: dict[str, str]


@dataclass(frozen=True)
class Started:
    port: int
    detail: str = ""  # why it did not start ("" when it serves)
    log_tail: tuple[str, ...] = ()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def free_port(tries: int = 64) -> int:
    """A port free now for a server that binds it seconds later: drawn below the kernel's ephemeral range, which the
    OS meanwhile hands to every outgoing connection and port-0 bind (vLLM's own sockets, a benchmark's connections),
    so none of those can take it first (two servers started side by side lost their port that way)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    below = range(max(1024, low - 12000), max(1024, low))
    for port in random.sample(below, min(tries, len(below))):
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
            return port
    with socket.socket() as sock:  # all taken: the kernel's choice
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        return read_log_tail(path, max_bytes=MiB).splitlines()[-lines:]
    except UserError:
        return []


@dataclass(frozen=True)
class ServeSh:
    """serve.sh (or what it runs: SERVE_COMMAND; tests put a stand-in here) for one config."""

    config: Path
    record: Path  # running.json of the directory the run writes into
    command: tuple[str, ...] = SERVE_COMMAND
    python: str = sys.executable

    def _run(self, env: Mapping[str, str], port: int, *args: str) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if k not in {KEY.API_KEY, KEY.HOST}}
        environ.update({**env, KEY.PORT: str(port)})
        environ.setdefault("KIMI_PYTHON", self.python)
        return subprocess.run(
            [*self.command, str(self.config), *args], env=environ, capture_output=True, text=True, check=False
        )

    def stop(self, env: Mapping[str, str], port: int) -> None:
        """`serve.sh --stop`; ServerLeftRunning when it fails (the record then keeps naming the server)."""
        if (stopped := self._run(env, port, "--stop")).returncode != 0:
            shown_env = (f"{k}={shlex.quote(v)}" for k, v in {**env, KEY.PORT: str(port)}.items() if k != KEY.API_KEY)
            shown = " ".join([*shown_env, shlex.join([*self.command, str(self.config), "--stop"])])
            said = (stopped.stderr.strip().splitlines() or stopped.stdout.strip().splitlines() or [""])[-1]
            raise ServerLeftRunning(port, shown, f"exit {stopped.returncode}" + (f": {said}" if said else ""))
        self.record.unlink(missing_ok=True)

    @contextlib.contextmanager
    def serving(self, name: str, env: Mapping[str, str], log: Path, say: Say) -> Iterator[Started]:
        """Yield how the start went; stop at the end even after a failed start (it may have left a process)."""
        port = free_port()
        log.parent.mkdir(parents=True, exist_ok=True)
        RunningServer(point=name, port=port, env=dict(env)).save(self.record)
        say(f"starting the server on port {port}")
        try:
            if (started := self._run(env, port, "--wait", "--log", str(log))).returncode == 0:
                yield Started(port)
            else:
                detail = (started.stderr.strip().splitlines() or [f"serve.sh exited {started.returncode}"])[-1]
                yield Started(port, detail, (*started.stderr.strip().splitlines()[-10:], *tail(log)))
        finally:
            self.stop(env, port)

    def stop_leftover(self, say: Say) -> None:
        """A run killed hard (or whose stop failed) may have left its server up; ServerLeftRunning if it stays."""
        if not (self.record.exists() or self.record.is_symlink()):
            return
        try:
            running = RunningServer.load(self.record, follow_symlinks=False)
        except UserError as exc:
            say(f"ignoring {self.record}: not a server record ({exc}); nothing stopped")
            with contextlib.suppress(OSError):
                self.record.unlink(missing_ok=True)
            return
        say(f"stopping the server an interrupted run left on port {running.port}")
        self.stop(running.env, running.port)
