"""The one resumable orchestrator (runs/): units kept, redone, recorded; a failure recorded and the run going on; a
server that could not be stopped ending the run with the state naming it; SIGTERM leaving the unit to redo."""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path

import pytest

from kimi_dflash.documents import Model
from kimi_dflash.launch.serve_sh import ServerLeftRunning
from kimi_dflash.runs.orchestrator import Interrupted, Outcome, Progress, Unit, run_units
from kimi_dflash.runs.state import DONE, FAILED, RUNNING, SKIPPED, RunState, StepOutputs
from qualify_fakes import fakes
from repo_paths import REPO_ROOT


class Signature(Model):
    what: str = "test"


class State(RunState):
    SCHEMA = "test/run-state"
    WHAT = "test state file"
    FILE, LOCK, RUN = "state.json", "test.lock", "test run"
    signature: Signature


def _state(out: Path) -> State:
    return State(signature=Signature()).at(out).open()


def _done(name: str, calls: list[str]) -> Unit:
    def work(say: object) -> Outcome:
        calls.append(name)
        return Outcome(DONE, f"{name} ok", StepOutputs(files=[f"{name}.json"]))

    return Unit(name, work, estimate_s=10.0)


def test_units_run_in_order_a_failure_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    calls: list[str] = []

    def broken(say: object) -> Outcome:
        raise OSError("disk on fire")

    units = [_done("a", calls), Unit("b", broken, 10.0), Unit("c", lambda say: Outcome(DONE), runs=False, reason="n/a"),
             _done("d", calls)]  # fmt: skip
    out = io.StringIO()
    tally = run_units(units, _state(tmp_path), "test", out=out)
    assert calls == ["a", "d"] and (tally.ran, tally.failed, tally.kept) == (3, 1, 0)
    recorded = State.load(tmp_path / "state.json")
    assert [recorded.status(n) for n in "abcd"] == [DONE, FAILED, SKIPPED, DONE]
    assert recorded.steps["b"].detail == "OSError: disk on fire" and recorded.steps["c"].detail == "n/a"
    assert recorded.steps["a"].outputs.files == ["a.json"] and recorded.steps["a"].duration_s is not None
    assert "test [2/4] b: failed: OSError: disk on fire" in out.getvalue()


def test_a_rerun_keeps_what_finished_and_redoes_what_failed_or_was_cut_off(tmp_path: Path) -> None:
    state = _state(tmp_path)
    for name, status in (("a", DONE), ("b", FAILED), ("c", SKIPPED)):
        state.finish(name, status, state.begin(name))
    state.begin("d")  # cut off: still running
    calls: list[str] = []
    out = io.StringIO()
    tally = run_units([_done(n, calls) for n in "abcd"], _state(tmp_path), "test", out=out)
    assert calls == ["b", "d"] and tally.kept == 2
    assert "test: 2 of 4 steps already finished; kept" in out.getvalue()
    assert "test [1/4] a: done in an earlier run; kept" in out.getvalue()


def test_a_unit_whose_own_files_say_it_finished_is_kept_whatever_the_state_says(tmp_path: Path) -> None:
    calls: list[str] = []
    finished = Unit("p", lambda say: Outcome(DONE), finished=lambda: True)
    missing = Unit("q", lambda say: (calls.append("q"), Outcome(DONE))[1], finished=lambda: False)
    state = _state(tmp_path)
    state.finish("q", DONE, state.begin("q"))  # recorded done, but its result file is gone: redone
    tally = run_units([finished, missing], state, "sweep", "points", out=io.StringIO())
    assert calls == ["q"] and tally.kept == 1 and tally.ran == 1


def test_a_failure_named_to_stop_the_run_stops_it(tmp_path: Path) -> None:
    calls: list[str] = []
    units = [Unit("preflight", lambda say: Outcome(FAILED, "FAIL: no GPU")), _done("next", calls)]
    tally = run_units(units, _state(tmp_path), "test", stops_the_run=("preflight",), out=io.StringIO())
    assert tally.stopped_at == "preflight" and calls == []


def test_a_server_left_running_ends_the_run_and_the_state_names_it(tmp_path: Path) -> None:
    def stuck(say: object) -> Outcome:
        raise ServerLeftRunning(8000, "PORT=8000 serve.sh x --stop", "exit 1")

    calls: list[str] = []
    with pytest.raises(ServerLeftRunning):
        run_units([Unit("grid", stuck), _done("next", calls)], _state(tmp_path), "test", out=io.StringIO())
    recorded = State.load(tmp_path / "state.json")
    assert recorded.status("grid") == FAILED and "PORT=8000 serve.sh x --stop" in recorded.server_left
    assert calls == []


def test_sigterm_interrupts_the_unit_and_leaves_it_to_redo(tmp_path: Path) -> None:
    def terminated(say: object) -> Outcome:
        os.kill(os.getpid(), signal.SIGTERM)
        return Outcome(DONE)

    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted, match="SIGTERM"):
        run_units([Unit("long", terminated)], _state(tmp_path), "test", out=io.StringIO())
    assert signal.getsignal(signal.SIGTERM) == previous  # the handler is the run's only
    assert State.load(tmp_path / "state.json").status("long") == RUNNING


def test_the_eta_scales_the_remaining_estimates_by_the_time_taken_and_counts_units_without_estimates() -> None:
    units = [Unit(n, lambda say: Outcome(DONE), estimate_s=60.0) for n in "abc"]
    progress = Progress("test", units, io.StringIO())
    assert progress.eta(0) == "3m00s"
    progress.done(units[0], 6.0)  # ten times faster than estimated
    assert progress.eta(1) == "12s"
    points = [Unit(n, lambda say: Outcome(DONE)) for n in "pq"]
    progress = Progress("sweep", points, io.StringIO())
    assert progress.eta(0) == "after the first"
    progress.done(points[0], 30.0)
    assert progress.eta(1) == "30s"


def test_a_qualify_run_terminated_in_a_step_exits_143_and_the_resume_redoes_that_step(tmp_path: Path) -> None:
    """Before the one orchestrator, SIGTERM outside the grid killed qualify without a word (no handler), and inside
    the grid it was recorded as the grid's failure and the run went on."""
    import json
    import subprocess

    out = tmp_path / "out"
    config = str(REPO_ROOT / "configs" / "demo-cpu.env")
    argv = [sys.executable, str(REPO_ROOT / "tests" / "qualify_fakes.py"), "", config, "--budget", "1s", "--no-plots",
            "--out", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO_ROOT / "src"), str(REPO_ROOT / "lab"))),
           "QUALIFY_FAKE_SIGTERM_IN": "reference"}  # fmt: skip
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 143, first.stderr[-2000:]
    assert "qualify: interrupted (SIGTERM); rerun with --resume to finish" in first.stderr
    steps = json.loads((out / "state.json").read_text())["steps"]
    assert steps["environment"]["status"] == DONE and steps["reference"]["status"] == RUNNING
    assert "candidate" not in steps

    del env["QUALIFY_FAKE_SIGTERM_IN"]
    second = subprocess.run([*argv, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert (
        "reference: done in an earlier run" not in second.stderr
        and "environment: done in an earlier run" in second.stderr
    )
    assert set(fakes()) - {"ranking"} <= set(
        json.loads((out / "state.json").read_text())["steps"]
    )  # ranking: a shoot-out's
