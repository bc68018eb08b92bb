"""The sweep against an unlucky run (issue 25): a serve.sh --stop that fails, a second sweep on a directory in
use, an interrupt. serve.sh is the stand-in (serve_stand_in: the instrument server, no vLLM)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_dflash.bench.result import load_result
from kimi_dflash.core import options
from kimi_dflash.core.errors import UserError
from kimi_dflash.runs.orchestrator import Interrupted
from kimi_dflash.sweep import cli as sweep_cli
from repo_paths import REPO_ROOT
from serve_stand_in import kill_servers, notes, serving, stand_in, wait_for

ROOT = REPO_ROOT
CONFIG = ROOT / "configs" / "demo-cpu.env"
WORKLOAD = ["--sessions", "1", "--max-tokens", "8", "--turns-per-session", "1", "--warmup", "0", "--no-plots"]


def _argv(out: Path, serve: Path) -> list[str]:
    return [str(CONFIG), "--grid", "NUM_SPECULATIVE_TOKENS=0,2", *WORKLOAD, "--out", str(out), "--serve-sh", str(serve)]


def test_a_refused_stop_stops_the_sweep_with_exit_1_names_the_server_and_a_rerun_stops_it_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    notes_dir = tmp_path / "stand-in"
    serve = stand_in(notes_dir, monkeypatch)
    monkeypatch.setenv("KIMI_PYTHON", sys.executable)
    monkeypatch.setenv("STAND_IN_REFUSE_STOP", "1")
    out = tmp_path / "sweep"
    try:
        assert options.run(sweep_cli, _argv(out, serve)) == 1
        err = capfd.readouterr().err
        [started] = notes(notes_dir, "started")  # the second point was not started beside the server left up
        port = started.split()[0]
        assert serving(int(port))
        stop = f"PORT={port} {serve} {CONFIG} --stop"
        assert f"error: the server on port {port} may still be running" in err and stop in err
        assert "refusing to signal anything" in err
        summary = (out / "summary.md").read_text(encoding="utf-8")
        assert "**A server is still running: the server on port" in summary and stop in summary
        assert (out / "running.json").is_file()  # it still names the server, for the rerun
        assert load_result(out / "NUM_SPECULATIVE_TOKENS-0.json").run.status == "complete"

        monkeypatch.delenv("STAND_IN_REFUSE_STOP")
        assert options.run(sweep_cli, _argv(out, serve)) == 0
        assert notes(notes_dir, "stops")[:2] == [port, port]  # refused, then stopped by the rerun before all else
        assert not serving(int(port)) and not (out / "running.json").exists()
        assert "still running" not in (out / "summary.md").read_text(encoding="utf-8")
    finally:
        kill_servers(notes_dir)


def test_a_second_sweep_on_a_directory_in_use_is_refused_with_the_first_pid_and_stops_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first sweep is caught while its first server starts; the same command run again is refused with exit 1
    naming the first's pid (without the lock it stopped the first's server and waited on its own start)."""
    notes_dir = tmp_path / "stand-in"
    serve = stand_in(notes_dir, monkeypatch)
    (notes_dir / "hold").touch()
    out = tmp_path / "sweep"
    command = [sys.executable, "-m", "kimi_dflash.sweep", *_argv(out, serve)]
    env = {**os.environ, "KIMI_PYTHON": sys.executable}  # PYTHONPATH: the checkout and the stand-in's server (stand_in)
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: notes(notes_dir, "started") or first.poll() is not None)
        assert first.poll() is None, first.communicate()
        running = (out / "running.json").read_bytes()

        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 1, second.stderr[-3000:]
        assert f"is in use by another sweep (pid {first.pid}" in second.stderr
        assert notes(notes_dir, "stops") == [] and (out / "running.json").read_bytes() == running
    finally:
        (notes_dir / "hold").unlink()
        _, stderr = first.communicate(timeout=300)
        kill_servers(notes_dir)
    assert first.returncode == 0, stderr[-3000:]
    started = [line.split()[0] for line in notes(notes_dir, "started")]
    assert len(started) == 2 and notes(notes_dir, "stops") == started  # each server stopped once, by its own run


@pytest.mark.parametrize(("raised", "code", "name"), [(KeyboardInterrupt(), 130, "SIGINT"),
                                                     (Interrupted("SIGTERM"), 143, "SIGTERM")])  # fmt: skip
def test_an_interrupt_says_which_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], raised: BaseException,
    code: int, name: str
) -> None:  # fmt: skip
    def interrupted(plan: object, run_state: object) -> None:
        raise raised

    monkeypatch.setattr(sweep_cli, "run_points", interrupted)
    (tmp_path / "serve.sh").touch()
    assert options.run(sweep_cli, _argv(tmp_path / "sweep", tmp_path / "serve.sh")) == code
    assert f"sweep: interrupted ({name}); rerun the same command to finish" in capsys.readouterr().err


def test_a_dir_that_cannot_be_written_gets_a_message_and_exit_1_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kimi_dflash import documents

    def full(path: Path, document: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(documents, "write_json_atomic", full)
    (tmp_path / "serve.sh").touch()
    out = tmp_path / "sweep"
    assert options.run(sweep_cli, _argv(out, tmp_path / "serve.sh")) == 1
    err = capsys.readouterr().err
    assert f"sweep: cannot write in --out {out} ({out / 'sweep.json'}): {os.strerror(errno.ENOSPC)}. Free some " in err
    assert "then rerun the same command (finished work is kept)" in err and "Traceback" not in err


@pytest.mark.parametrize("spelling", [["--header", "Authorization: Bearer k1"], ["--header=X-Api-Key:k1"]])
def test_a_credential_header_is_not_stored_in_the_sweep_options(spelling: list[str]) -> None:
    """sweep.json keeps the benchmark options: a credential header is refused (whichever spelling), unechoed."""
    with pytest.raises(UserError, match="takes no credential header") as refused:
        sweep_cli._bench_args(["--max-tokens", "8", *spelling])
    assert "k1" not in str(refused.value)
    assert sweep_cli._bench_args(["--header", "X-Tenant: a"]) == ["--header", "X-Tenant: a"]
