"""serve.sh --wait / --stop against real vLLM: concurrent starts give one server and one refusal; orphans of a
SIGKILLed API server are stopped by the next start; --stop leaves no process and no /dev/shm residue; Ctrl-C during
start-up leaves nothing running and says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kimi_dflash.launch import ownership
from repo_paths import CONFIGS_DIR, REPO_ROOT
from serve_helpers import health_ok
from server_fixtures import free_port, serve_env

pytestmark = [pytest.mark.server, pytest.mark.slow]

SERVE = str(REPO_ROOT / "serve.sh")
DEMO = str(CONFIGS_DIR / "demo-cpu.env")


def _as_from_a_terminal() -> None:
    # A suite started in the background (`cmd &` in a script) inherits SIGINT ignored, and a shell cannot trap a
    # signal ignored at its entry: serve.sh gets the default disposition a user's Ctrl-C meets.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _serve(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [SERVE, DEMO, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_as_from_a_terminal,
    )  # fmt: skip


def _record(port: int) -> dict:
    from kimi_dflash.core.paths import cache_root

    return json.loads((cache_root() / "run" / f"serve-{port}.pid").read_text())


def _assert_nothing_left(token: str, pids: list[int]) -> None:
    assert ownership.family(token) == [], "a process of the server survived"
    residue = [p for pid in pids for p in Path("/dev/shm").glob(f"{ownership.KMP_PREFIX}{pid}_*")]
    assert residue == []


def _session(leader: int) -> list[int]:
    """Every live process in the session serve.sh gave vLLM (it never calls setsid: its whole family)."""
    pids = (int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit())
    return sorted(pid for pid in pids if ownership.session_of(pid) == leader and ownership.alive(pid))


def _titles(pids: list[int]) -> list[str]:
    return [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace") for pid in pids]


def _has_engine_core(pids: list[int]) -> bool:
    """vLLM's engine core among ``pids``: by its title (VLLM::EngineCore) or, when vLLM has not retitled it (seen
    with a minimal environment), as the process multiprocessing spawned (not the resource tracker)."""
    for pid in pids:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        if cmdline.startswith("VLLM::EngineCore") or "multiprocessing.spawn import spawn_main" in cmdline:
            return True
    return False


def test_concurrent_starts_orphans_and_stop(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    port = free_port()
    env = serve_env(port)
    first, second = _serve(env, "--wait", "--skip-preflight"), _serve(env, "--wait", "--skip-preflight")
    try:
        outcomes = [(p.wait(timeout=900), p.stderr.read()) for p in (first, second)]  # type: ignore[union-attr]
        codes = sorted(code for code, _ in outcomes)
        assert codes == [0, 1], outcomes
        refusal = next(err for code, err in outcomes if code == 1)
        assert "another serve.sh is starting or stopping" in refusal or "still running" in refusal
        assert "Traceback" not in refusal
        assert health_ok(port)

        record = _record(port)
        family = ownership.family(record["token"])
        # The token is found in every process of the server, the engine core included (vLLM's setproctitle would
        # overwrite /proc/<pid>/environ without SPT_NOENV), whatever the process layout (uni: the worker runs in
        # the engine core; mp: a process of its own).
        assert record["pid"] in family and family == _session(record["pid"]), (family, _session(record["pid"]))
        assert _has_engine_core(family), _titles(family)
        os.kill(record["pid"], signal.SIGKILL)  # the API server dies; its engine core and worker are orphaned
        time.sleep(3)
        orphans = ownership.orphans_on_port(port)
        assert record["token"] in orphans and _has_engine_core(orphans[record["token"]]), orphans

        again = subprocess.run([SERVE, DEMO, "--wait", "--skip-preflight"], env=env, capture_output=True, text=True,
                               timeout=900)  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        assert "leftover vLLM process" in again.stderr
        _assert_nothing_left(record["token"], family)
        second_record = _record(port)
        second_family = ownership.family(second_record["token"])
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
        stopped = subprocess.run([SERVE, DEMO, "--stop"], env=env, capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0 and "stopped server" in stopped.stderr, stopped.stderr
    _assert_nothing_left(second_record["token"], second_family)
    assert not health_ok(port)


def test_ctrl_c_during_wait_stops_what_was_starting(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    port = free_port()
    env = serve_env(port)
    serve = _serve(env, "--wait", "--skip-preflight")
    try:
        assert serve.stderr is not None
        lines = []
        for line in serve.stderr:
            lines.append(line)
            if "serve: vLLM pid" in line:
                break
        token = _record(port)["token"]
        time.sleep(5)  # vLLM is importing / spawning its engine core
        family = ownership.family(token)
        assert family
        serve.send_signal(signal.SIGINT)
        code = serve.wait(timeout=120)
        rest = serve.stderr.read()
    finally:
        if serve.poll() is None:
            serve.kill()
    assert code == 130, rest
    assert "interrupted (SIGINT)" in rest and "nothing is left running" in rest
    assert "Traceback" not in rest
    _assert_nothing_left(token, family)
    from kimi_dflash.core.paths import cache_root

    assert not (cache_root() / "run" / f"serve-{port}.pid").exists()
