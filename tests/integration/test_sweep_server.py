"""The sweep launcher on the real CPU demo: a 2-point grid (no speculation, DFlash k=2) x 2 concurrencies, killed
hard in the middle of its second point, rerun to finish, rerun again to do nothing. Three server starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kimi_dflash.bench.result import load_result
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
LAUNCHER = ROOT / "launchers" / "kimi26-vllm-dflash-sweep.sh"
ARGS = ["--grid", "NUM_SPECULATIVE_TOKENS=0,2", "--sessions", "1,2", "--max-tokens", "16",
        "--turns-per-session", "1", "--warmup", "1"]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "KIMI_PYTHON": sys.executable}


def _sweep(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LAUNCHER), str(ROOT / "configs" / "demo-cpu.env"), *ARGS, "--out", str(out)],
                          env=_env(), capture_output=True, text=True, timeout=1200, check=False)  # fmt: skip


def _second_point_started(out: Path) -> bool:
    try:
        return json.loads((out / "running.json").read_text("utf-8"))["point"] == "NUM_SPECULATIVE_TOKENS-2"
    except (OSError, ValueError, KeyError):
        return False


@pytest.mark.server
@pytest.mark.slow
def test_sweep_resumes_after_a_hard_kill_and_a_finished_sweep_reruns_for_free(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    out = tmp_path / "sweep"
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen([str(LAUNCHER), str(ROOT / "configs" / "demo-cpu.env"), *ARGS, "--out", str(out)],
                             env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    baseline, dflash = out / "NUM_SPECULATIVE_TOKENS-0.json", out / "NUM_SPECULATIVE_TOKENS-2.json"
    deadline = time.monotonic() + 900
    while not _second_point_started(out):
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        assert time.monotonic() < deadline, "the first point did not finish in 15 minutes"
        time.sleep(1)
    os.killpg(first.pid, signal.SIGKILL)  # no chance to clean up: the server of point 2 is left running
    first.wait()
    assert baseline.exists() and not dflash.exists()

    second = _sweep(out)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "stopping the server an interrupted run left" in second.stderr
    assert "1 of 2 points already finished" in second.stderr
    for path, k in ((baseline, "0"), (dflash, "2")):
        result = load_result(path)
        assert result.run.status == "complete" and [level.sessions for level in result.results] == [1, 2]
        assert result.server_config is not None and result.server_config.overrides == {"NUM_SPECULATIVE_TOKENS": k}
    assert load_result(dflash).results[0].spec_decode is not None  # k=2 really speculated
    assert load_result(baseline).results[0].spec_decode is None  # k=0 really did not
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert summary.count("| NUM_SPECULATIVE_TOKENS=") == 4  # 2 points x 2 concurrencies
    assert (out / "pareto.png").stat().st_size > 0 and (out / "tok_s_vs_concurrency.png").stat().st_size > 0

    before = {p: p.stat().st_mtime_ns for p in (baseline, dflash)}
    third = _sweep(out)
    assert third.returncode == 0 and "0 points run now" in third.stderr and "starting the server" not in third.stderr
    assert {p: p.stat().st_mtime_ns for p in before} == before
