"""vLLM renames its processes with setproctitle ("VLLM::EngineCore"); by default that overwrites what
/proc/<pid>/environ shows, token included. The environment serve.sh gives vLLM keeps it readable (real processes
and the setproctitle vLLM itself uses, no vLLM)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kimi_dflash.launch import ownership
from kimi_dflash.launch.server import _child_env
from kimi_dflash.plan import LaunchPlan

pytest.importorskip("setproctitle")

# What vLLM's set_process_title does in the engine core and its workers, then waits to be looked at.
RENAMED_CHILD = "import setproctitle, sys, time; setproctitle.setproctitle('VLLM::EngineCore'); print(1, flush=True); "
RENAMED_CHILD += "time.sleep(60)"


def _renamed_child(env: dict[str, str]) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", RENAMED_CHILD], env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "1"  # renamed by now
    return child


def _plan() -> LaunchPlan:
    return LaunchPlan(("vllm", "serve"), {}, frozenset(), "127.0.0.1", 8262, "m")


def _stop(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait()


def test_a_renamed_vllm_process_keeps_the_token_readable() -> None:
    token = ownership.new_token()
    child = _renamed_child(_child_env(_plan(), token))
    try:
        assert ownership.family(token) == [child.pid]
        title = Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")[0]
        assert title == b"VLLM::EngineCore"  # vLLM still names it (within the original command line's length)
    finally:
        _stop(child)


def test_without_the_switch_the_token_is_overwritten() -> None:
    # Why the switch is there: the same child without it is invisible to the ownership check.
    token = ownership.new_token()
    env = {key: value for key, value in _child_env(_plan(), token).items() if key not in ownership.KEEP_ENVIRON}
    child = _renamed_child(env)
    try:
        time.sleep(0.1)
        assert ownership.family(token) == []
    finally:
        _stop(child)
