"""--stop and --wait never signal what this project did not start: the pid file's ownership record, the token in
the environment of vLLM's family, orphans, the port lock and Intel OpenMP residue (real processes, no vLLM)."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from kimi_dflash.launch import ownership
from kimi_dflash.launch.server import running_server, stop_detached, stop_orphans
from repo_paths import CONFIGS_DIR
from serve_helpers import run_serve, tiny_cpu_config
from server_fixtures import free_port


def _sleeper(env: dict[str, str] | None = None, new_session: bool = True) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(["sleep", "120"], env={**os.environ, **(env or {})}, start_new_session=new_session)
    # Popen returns once exec has begun; /proc/PID/environ reads empty until the kernel has set the new image up (a
    # loaded machine showed it: is_ours found no token in a just-started process).
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{process.pid}/environ").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    return process


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def _ours(process: subprocess.Popen[bytes], token: str, port: int) -> ownership.ServerRecord:
    ticks = ownership.start_ticks(process.pid)
    assert ticks is not None
    return ownership.ServerRecord(process.pid, ticks, token, port)


def _record_file(tmp_path: Path, record: ownership.ServerRecord) -> Path:
    path = tmp_path / f"serve-{record.port}.pid"
    path.write_text(record.to_json() + "\n")
    return path


def test_stop_refuses_an_unrelated_process_group(tmp_path: Path, procs: list) -> None:
    stranger = _sleeper()  # not started by us: no token in its environment
    procs.append(stranger)
    forged = ownership.ServerRecord(stranger.pid, ownership.start_ticks(stranger.pid) or 0, "f" * 32, free_port())
    pid_path = _record_file(tmp_path, forged)
    outcome = stop_detached(pid_path, grace_s=1)
    assert outcome.ok and "not running" in outcome.message and "nothing signalled" in outcome.message
    time.sleep(0.2)
    assert stranger.poll() is None  # untouched


def test_stop_refuses_a_recycled_pid(tmp_path: Path, procs: list) -> None:
    token = ownership.new_token()
    process = _sleeper({ownership.TOKEN_VAR: token})
    procs.append(process)
    record = _ours(process, token, free_port())
    recycled = ownership.ServerRecord(record.pid, record.start_ticks + 1, token, record.port)  # another start time
    assert not ownership.is_ours(recycled)
    assert ownership.is_ours(record)


@pytest.mark.parametrize("content", ["0\n", "-5\n", "99999999999\n", "1\n", "garbage", "", '{"pid": 0}', "12345\n"])
def test_invalid_pid_files_are_refused_without_signalling(tmp_path: Path, content: str) -> None:
    pid_path = tmp_path / "serve-8000.pid"
    pid_path.write_text(content)
    outcome = stop_detached(pid_path, grace_s=1)
    assert not outcome.ok
    assert "refusing to signal anything" in outcome.message and str(pid_path) in outcome.message
    assert pid_path.exists()  # left for the user to inspect


@pytest.mark.parametrize("content", ["0\n", "-5\n", "99999999999\n", "not a pid"])
def test_serve_stop_with_an_invalid_pid_file_exits_1_without_traceback(tmp_path: Path, content: str) -> None:
    port = free_port()
    cache = tmp_path / "cache"
    (cache / "run").mkdir(parents=True)
    (cache / "run" / f"serve-{port}.pid").write_text(content)
    result = run_serve(
        str(CONFIGS_DIR / "demo-cpu.env"), "--stop", env={"PORT": str(port), "KIMI_DFLASH_CACHE": str(cache)}
    )
    assert result.returncode == 1, result.stderr
    assert "refusing to signal anything" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("kind", ["fifo", "symlink", "huge", "directory"])
def test_serve_stop_refuses_a_pid_file_that_is_no_regular_small_file(tmp_path: Path, procs: list, kind: str) -> None:
    # A FIFO there hung --stop while it held the port lock; a symlink points at a file someone else chose.
    port = free_port()
    run = tmp_path / "cache" / "run"
    run.mkdir(parents=True, mode=0o700)
    pid_path = run / f"serve-{port}.pid"
    if kind == "fifo":
        os.mkfifo(pid_path)
    elif kind == "symlink":
        token = ownership.new_token()
        server = _sleeper({ownership.TOKEN_VAR: token})  # even a record of a live server of ours, behind a link
        procs.append(server)
        (tmp_path / "record").write_text(_ours(server, token, port).to_json())
        pid_path.symlink_to(tmp_path / "record")
    elif kind == "huge":
        pid_path.write_text(" " * 100_000 + "{}")
    else:
        pid_path.mkdir()
    result = run_serve(str(CONFIGS_DIR / "demo-cpu.env"), "--stop",
                       env={"PORT": str(port), "KIMI_DFLASH_CACHE": str(tmp_path / "cache")})  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "refusing to signal anything" in result.stderr and "not a server record" in result.stderr
    assert "Traceback" not in result.stderr
    assert all(process.poll() is None for process in procs)  # nothing signalled


def test_stop_stops_the_whole_family_and_its_openmp_residue(tmp_path: Path, procs: list) -> None:
    token, port = ownership.new_token(), free_port()
    env = {ownership.TOKEN_VAR: token, ownership.PORT_VAR: str(port)}
    leader = _sleeper(env)
    straggler = _sleeper(env)  # e.g. a worker that left the group: found by its token
    bystander = _sleeper({ownership.PORT_VAR: str(port)})  # same port, no token: never ours
    procs += [leader, straggler, bystander]
    shm = [Path(f"/dev/shm/{ownership.KMP_PREFIX}{pid}_0") for pid in (leader.pid, straggler.pid, bystander.pid)]
    for path in shm:
        path.write_text("x")
    try:
        pid_path = _record_file(tmp_path, _ours(leader, token, port))
        assert running_server(pid_path) is not None
        outcome = stop_detached(pid_path, grace_s=5)
        assert outcome.ok and f"stopped server {leader.pid}" in outcome.message
        assert leader.wait(5) is not None and straggler.wait(5) is not None
        assert bystander.poll() is None
        assert not pid_path.exists()
        assert not shm[0].exists() and not shm[1].exists()
        assert shm[2].exists()  # a live process that is not ours keeps its file
    finally:
        for path in shm:
            path.unlink(missing_ok=True)


def test_orphans_are_found_by_token_and_port_and_a_live_server_never(procs: list) -> None:
    port = free_port()
    orphan_token, live_token = ownership.new_token(), ownership.new_token()
    # A shell that starts a child in its own session and exits at once: the child's session leader is gone.
    shell = subprocess.run(
        ["sh", "-c", "sleep 120 >/dev/null 2>&1 & echo $!"],
        env={**os.environ, ownership.TOKEN_VAR: orphan_token, ownership.PORT_VAR: str(port)},
        capture_output=True,
        text=True,
        start_new_session=True,
        check=True,
    )
    orphan = int(shell.stdout.strip())
    live = _sleeper({ownership.TOKEN_VAR: live_token, ownership.PORT_VAR: str(port)})
    procs.append(live)
    try:
        found = ownership.orphans_on_port(port)
        assert found == {orphan_token: [orphan]}
        assert ownership.orphans_on_port(port + 1 if port < 65535 else port - 1) == {}
        said: list[str] = []
        assert stop_orphans(port, said.append, grace_s=5) == [orphan]
        assert "leftover vLLM process" in said[0]
        assert not ownership.alive(orphan)
        assert live.poll() is None
    finally:
        if ownership.alive(orphan):
            os.kill(orphan, signal.SIGKILL)


def test_port_lock_refuses_a_second_holder(tmp_path: Path) -> None:
    lock = tmp_path / "serve-1234.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'a'); fcntl.flock(f, fcntl.LOCK_EX); "
         "print('held', flush=True); time.sleep(60)", str(lock)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with pytest.raises(ownership.StartInProgress), ownership.port_lock(lock):
            pass
    finally:
        holder.kill()
        holder.wait()
    with ownership.port_lock(lock):  # released with its holder
        pass


def test_parse_record_accepts_only_what_start_writes() -> None:
    record = ownership.ServerRecord(1234, 99, "a" * 32, 8000)
    assert ownership.parse_record(record.to_json()) == record
    for bad in ('{"pid": true, "start_ticks": 1, "token": "' + "a" * 32 + '", "port": 8000}', "[1]", "{}"):
        with pytest.raises(ownership.PidFileError):
            ownership.parse_record(bad)


class _Impostor(http.server.BaseHTTPRequestHandler):
    """Another server on the port: answers /health and a completion as vLLM would, and keeps any key it is sent."""

    keys: ClassVar[list[str]] = []

    def _answer(self) -> None:
        self.keys.extend(self.headers.get_all("Authorization") or [])
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"choices": [{"text": "x"}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def impostor() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Impostor)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _processes_for_port(port: int) -> list[int]:
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and (ownership.environ_of(int(entry.name)) or {}).get(ownership.PORT_VAR) == str(port)
    ]


def test_wait_is_not_ready_when_another_server_answers_on_the_port(tmp_path: Path, impostor: int) -> None:
    # It said "ready after 0.0 s" (exit 0) with --skip-preflight: the impostor answered the readiness probe. And the
    # probe sent the API key to whatever answered, before it knew whose the listener was.
    env = {"PORT": str(impostor), "KIMI_DFLASH_CACHE": str(tmp_path / "cache"), "API_KEY": "sk-probe-0123456789"}
    result = run_serve(str(tiny_cpu_config(tmp_path)), "--wait", "--skip-preflight", env=env)
    assert result.returncode == 1, result.stderr
    assert _Impostor.keys == []
    assert f"port {impostor} is answered by another server (pid {os.getpid()})" in result.stderr
    assert "ready after" not in result.stderr and "Traceback" not in result.stderr
    assert _processes_for_port(impostor) == []  # what was started has been stopped
    assert not (tmp_path / "cache" / "run" / f"serve-{impostor}.pid").exists()
    assert urllib.request.urlopen(f"http://127.0.0.1:{impostor}/health", timeout=5).status == 200  # untouched


def test_others_listening_names_the_holder_of_a_port(procs: list) -> None:
    token = ownership.new_token()
    listener = subprocess.Popen(
        [sys.executable, "-c", "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
         "print(s.getsockname()[1], flush=True); time.sleep(60)"],
        env={**os.environ, ownership.TOKEN_VAR: token}, stdout=subprocess.PIPE,
    )  # fmt: skip
    procs.append(listener)
    assert listener.stdout is not None
    port = int(listener.stdout.readline())
    assert ownership.others_listening(port, token) is None  # held by a process carrying the token
    assert ownership.others_listening(port, ownership.new_token()) == f"pid {listener.pid}"
    assert ownership.others_listening(free_port(), token) is not None  # nothing listens: not ours either


def test_the_stop_hint_keeps_the_environment_overrides_but_never_a_secret(tmp_path: Path, procs: list) -> None:
    # A server on PORT=9000 (from the environment) was told to stop with "./serve.sh CONFIG --stop": port 8262.
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.launch.cli import stop_command

    environ = {"PORT": "9000", "API_KEY": "sk-hint-0123456789", "SERVED_MODEL_NAME": "my model", "HOME": "/x",
               "KIMI_DFLASH_CACHE": "/tmp/my cache"}  # fmt: skip
    config = load_config(CONFIGS_DIR / "demo-cpu.env", environ=environ)
    assert stop_command(config, "configs/demo-cpu.env", environ) == (
        "SERVED_MODEL_NAME='my model' PORT=9000 KIMI_DFLASH_CACHE='/tmp/my cache' "
        "./serve.sh configs/demo-cpu.env --stop"
    )
    # serve.sh itself, refusing a second --wait while the recorded server runs (no vLLM needed)
    port, cache = free_port(), tmp_path / "cache"
    token = ownership.new_token()
    server = _sleeper({ownership.TOKEN_VAR: token})
    procs.append(server)
    (cache / "run").mkdir(parents=True, mode=0o700)
    (cache / "run" / f"serve-{port}.pid").write_text(_ours(server, token, port).to_json())
    env = {"PORT": str(port), "KIMI_DFLASH_CACHE": str(cache), "API_KEY": "sk-hint-0123456789"}
    config_path = tiny_cpu_config(tmp_path)
    result = run_serve(str(config_path), "--wait", "--skip-preflight", env=env)
    assert result.returncode == 1 and "still running" in result.stderr, result.stderr
    assert f"PORT={port} KIMI_DFLASH_CACHE={cache} ./serve.sh {config_path} --stop" in result.stderr
    assert "sk-hint" not in result.stderr
