"""Run a sweep: for each unfinished point start the server (serve.sh CONFIG --wait with the point's overrides),
benchmark it at every concurrency level (the benchmark warms it up first), stop it, and write the result."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kimi_dflash.bench.progress import format_duration
from kimi_dflash.bench.report import write_atomic
from kimi_dflash.bench.result import ServerConfig, load_result
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.user_files import read_user_json
from kimi_dflash.sweep import state
from kimi_dflash.sweep.grid import Point

LOG_TAIL_LINES = 40
STOP_TIMEOUT_S = 180


# What serve.sh runs, in this interpreter: works from a checkout and from an installed wheel alike.
SERVE_COMMAND = (sys.executable, "-m", "kimi_dflash.launch.cli")


class Interrupted(Exception):
    """SIGTERM/SIGINT: stop the current point's server and leave the point unfinished."""


class ServerLeftRunning(Exception):
    """`serve.sh --stop` failed: the point's server may still be up. The run stops here (another server would
    compete with it for the box) and says which server it is and how to stop it; DIR/running.json keeps naming
    it, so a rerun first tries to stop it again."""

    def __init__(self, port: int, command: str, detail: str) -> None:
        super().__init__(
            f"the server on port {port} may still be running: its stop failed ({detail}). Stop it with: {command}"
        )
        self.port, self.command, self.detail = port, command, detail


@dataclass(frozen=True)
class SweepPlan:
    config: Path
    serve_command: tuple[str, ...]  # serve.sh, or what it runs: SERVE_COMMAND
    points: list[Point]
    sessions: tuple[int, ...]
    bench_args: list[str]
    out: Path
    python: str = sys.executable
    config_as_given: str = ""  # stored in results (an absolute path would name this machine's directories)
    server_env: tuple[tuple[str, str], ...] = ()  # config keys for every server, under each point's overrides
    api_key: str | None = field(default=None, repr=False)  # to the benchmark's environment only, never stored


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        return []


class Progress:
    """Points done / total and an ETA from the mean wall time of the points run so far."""

    def __init__(self, total: int, todo: int, out: TextIO) -> None:
        self.total, self.todo, self.out = total, todo, out
        self.started = time.monotonic()
        self.durations: list[float] = []

    def eta(self) -> str:
        if not self.durations:
            return "ETA after the first point"
        remaining = self.todo - len(self.durations)
        return f"ETA {format_duration(remaining * sum(self.durations) / len(self.durations))}"

    def say(self, index: int, point: Point, text: str) -> None:
        elapsed = format_duration(time.monotonic() - self.started)
        print(f"sweep [{index}/{self.total}] {point.label}: {text} (elapsed {elapsed}, {self.eta()})",
              file=self.out, flush=True)  # fmt: skip


class PointRunner:
    def __init__(self, plan: SweepPlan, out: TextIO = sys.stderr) -> None:
        self.plan = plan
        self.out = out
        self.logs = plan.out / "logs"

    # -- servers ---------------------------------------------------------------------------------------
    def _command(self, env_overrides: dict[str, str], port: int, *args: str) -> tuple[dict[str, str], list[str]]:
        """(the overrides serve.sh gets, PORT included; its command line)."""
        overrides = {**env_overrides, "PORT": str(port)}
        return overrides, [*self.plan.serve_command, str(self.plan.config), *args]

    def _serve(self, env_overrides: dict[str, str], port: int, *args: str) -> subprocess.CompletedProcess[str]:
        overrides, command = self._command(env_overrides, port, *args)
        env = {k: v for k, v in os.environ.items() if k not in {"API_KEY", "HOST"}}
        env.update(overrides)
        env.setdefault("KIMI_PYTHON", self.plan.python)
        return subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=None)

    def _stop(self, env_overrides: dict[str, str], port: int) -> None:
        """`serve.sh --stop`; ServerLeftRunning when it fails (running.json is then kept, naming the server)."""
        stopped = self._serve(env_overrides, port, "--stop")
        if stopped.returncode != 0:
            overrides, command = self._command(env_overrides, port, "--stop")
            shown_env = (f"{k}={shlex.quote(v)}" for k, v in overrides.items() if k != "API_KEY")  # never printed
            shown = " ".join([*shown_env, shlex.join(command)])
            said = (stopped.stderr.strip().splitlines() or stopped.stdout.strip().splitlines() or [""])[-1]
            raise ServerLeftRunning(port, shown, f"exit {stopped.returncode}" + (f": {said}" if said else ""))
        (self.plan.out / state.RUNNING_FILE).unlink(missing_ok=True)

    def stop_leftover(self) -> None:
        """A previous run killed hard (or whose stop failed) may have left its point's server up: stop it before
        starting anything; ServerLeftRunning when that stop fails too."""
        path = self.plan.out / state.RUNNING_FILE
        if not (path.exists() or path.is_symlink()):
            return
        try:
            running = read_user_json(path, what="running-server record", max_bytes=1 << 20, follow_symlinks=False)
            port, env = int(running["port"]), dict(running["env"])
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
                raise TypeError("env is not text")
        except (UserError, ValueError, KeyError, TypeError) as exc:
            print(f"sweep: ignoring {path}: not a server record ({exc}); nothing stopped", file=self.out)
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
            return
        print(f"sweep: stopping the server an interrupted run left on port {port}", file=self.out)
        self._stop(env, port)

    # -- one point -------------------------------------------------------------------------------------
    def run(self, point: Point, progress: Progress, index: int, on_ready: Callable[[str], None] | None = None) -> bool:
        """Start, benchmark, stop. True when the point finished; a failure is recorded, not raised.

        ``on_ready(base_url)`` runs while the server is up, before the benchmark (qualify uses the same server for
        its losslessness outputs instead of starting it twice); what it raises is the caller's to handle."""
        env = {**dict(self.plan.server_env), **point.server_env()}
        port = free_port()
        self.logs.mkdir(parents=True, exist_ok=True)
        server_log, bench_log = state.server_log(self.plan.out, point), state.bench_log(self.plan.out, point)
        state.failure_path(self.plan.out, point).unlink(missing_ok=True)
        write_atomic(self.plan.out / state.RUNNING_FILE, {"point": point.name, "port": port, "env": env})
        progress.say(index, point, f"starting the server on port {port}")
        try:
            started = self._serve(env, port, "--wait", "--log", str(server_log))
            if started.returncode != 0:
                detail = (started.stderr.strip().splitlines() or [f"serve.sh exited {started.returncode}"])[-1]
                tail = started.stderr.strip().splitlines()[-10:] + _tail(server_log)
                state.write_failure(self.plan.out, state.Failure(point.name, "server", detail, tail))
                progress.say(index, point, f"FAILED: the server did not start ({detail}); going on")
                return False
            if on_ready is not None:
                on_ready(f"http://127.0.0.1:{port}")
            return self._benchmark(point, env, port, bench_log, progress, index)
        finally:
            self._stop(env, port)

    def _benchmark(self, point: Point, env: dict[str, str], port: int, bench_log: Path, progress: Progress,
                   index: int) -> bool:  # fmt: skip
        partial = self.plan.out / "partial" / f"{point.name}.json"
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.unlink(missing_ok=True)
        command = [
            self.plan.python, "-m", "kimi_dflash.bench", "--base-url", f"http://127.0.0.1:{port}",
            "--sessions", ",".join(map(str, self.plan.sessions)), "--label", point.name, "--output", str(partial),
            *self.plan.bench_args,
        ]  # fmt: skip
        progress.say(index, point, f"benchmarking at {','.join(map(str, self.plan.sessions))} sessions")
        with bench_log.open("w", encoding="utf-8") as log:
            # Not `env`: that is the point's server environment, read again below for the result's config values.
            bench_env = None if self.plan.api_key is None else {**os.environ, "OPENAI_API_KEY": self.plan.api_key}
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=bench_env
            )
            assert process.stdout is not None
            try:
                for line in process.stdout:
                    log.write(line)
                    print(f"    {line.rstrip()}", file=self.out, flush=True)
                code = process.wait()
            except BaseException:
                process.send_signal(signal.SIGINT)  # the benchmark writes what it has, then exits
                process.wait(timeout=60)
                raise
        detail = f"benchmark exited {code}"
        try:
            result = load_result(partial)
        except UserError as exc:
            result, detail = None, f"{detail}; {exc}"
        if result is None or code != 0 or result.run.status != "complete":
            if result is not None and result.run.status_detail:
                detail = f"{detail}: {result.run.status_detail}"
            state.write_failure(self.plan.out, state.Failure(point.name, "benchmark", detail, _tail(bench_log)))
            progress.say(index, point, f"FAILED: the benchmark did not complete ({detail}); going on")
            return False
        values = self._config_values(env, port)
        values.pop("PORT", None)  # picked per run: not a setting of the point
        server_config = ServerConfig(
            config=self.plan.config_as_given or self.plan.config.name, overrides=dict(point.overrides), values=values
        )
        write_atomic(state.result_path(self.plan.out, point), dataclasses.replace(result, server_config=server_config))
        partial.unlink(missing_ok=True)
        return True

    def _config_values(self, env: dict[str, str], port: int) -> dict[str, str]:
        from kimi_dflash.config.validate import load_config

        environ = {**os.environ, **env, "PORT": str(port)}
        config = load_config(self.plan.config, environ=environ)
        return {key: "" if value is None else str(value) for key, value in config.values.items() if key != "API_KEY"}


def run_sweep(plan: SweepPlan, out: TextIO = sys.stderr) -> tuple[int, int, int]:
    """(finished before, run now, failed now). Finished points are skipped; others are (re)done."""
    runner = PointRunner(plan, out)
    runner.stop_leftover()
    todo = [(i, p) for i, p in enumerate(plan.points, start=1) if state.finished_result(plan.out, p) is None]
    skipped = len(plan.points) - len(todo)
    if skipped:
        print(f"sweep: {skipped} of {len(plan.points)} points already finished in {plan.out}; skipping them",
              file=out)  # fmt: skip
    progress = Progress(len(plan.points), len(todo), out)

    def on_term(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, on_term)
    failed = 0
    try:
        for index, point in todo:
            began = time.monotonic()
            if not runner.run(point, progress, index):
                failed += 1
            progress.durations.append(time.monotonic() - began)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return skipped, len(todo), failed


def describe(plan: SweepPlan) -> Sequence[str]:
    """The plan of points, for --dry-run."""
    lines = [f"sweep of {plan.config}: {len(plan.points)} server points x sessions {','.join(map(str, plan.sessions))}"]
    for index, point in enumerate(plan.points, start=1):
        done = "finished" if state.finished_result(plan.out, point) else "to run"
        env = " ".join(f"{k}={v}" for k, v in point.server_env().items()) or "(no overrides)"
        lines.append(f"  [{index}] {point.label:<40} serve.sh env: {env:<50} {done}")
    key = "; API key: given (not shown)" if plan.api_key else ""
    lines.append(f"benchmark options: {' '.join(plan.bench_args) or '(defaults)'}{key}; results in {plan.out}")
    return lines
