"""lab/gpu/run.sh, the one command for the GPU host (kimi_dflash_lab.gpu_run), and its CPU rehearsal.

Fast: the parts list the steps the issue asks for, DEVICE is read through the project's loader, a GPU run without
the kit's bundle says how to build it, and the checkout still fits beside the bundle in one 64 MiB copy.
Server (~4-5 min): both parts against the CPU demo, every step's command lines executed (the GPU-only servers
checked with --dry-run on the GPU configs), each step's files present.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from kimi_dflash.launch.serve_sh import free_port
from kimi_dflash_lab.gpu_run import steps
from kimi_dflash_lab.gpu_run.context import Context, StepFailed
from kimi_dflash_lab.gpu_run.prepare import LIMIT_MIB, checkout_mib
from kimi_dflash_lab.gpu_run.runner import config_device
from repo_paths import REPO_ROOT

RUN = REPO_ROOT / "lab" / "gpu" / "run.sh"
BUNDLE_MIB = 57.7  # the GPU kit's pruned bundle (shared/tools/gpu-kit/README.md, measured)


def test_the_parts_hold_the_steps_the_issue_asks_for() -> None:
    assert [s.name for s in steps.steps_of(1)] == ["kit", "fabricate", "serve-first", "serve-second", "qualify"]
    assert [s.name for s in steps.steps_of(2)] == ["kit", "fabricate", "qualify", "fp8", "hook-cost", "summary"]
    assert set(steps.FP8_VARIANTS) == {"dynamic-eager", "calibrated-eager", "dynamic-graphs"}
    assert steps.RECIPE_RATES == "0.64,0.34"  # the recipe's K2.6 acceptance at k=2


@pytest.mark.parametrize(
    ("config", "device"), [("configs/demo-gpu.env", "cuda"), ("configs/demo-gpu-fp8kv.env", "cuda"),
                           ("configs/demo-cpu.env", "cpu"), ("configs/production-fp8kv.env", "rocm")],
)  # fmt: skip
def test_the_device_is_read_through_the_projects_loader(config: str, device: str, monkeypatch) -> None:
    monkeypatch.delenv("DEVICE", raising=False)
    assert config_device(config) == device


def test_a_config_the_loader_refuses_stops_the_run_before_anything(tmp_path: Path) -> None:
    # Its own reader hung on a FIFO, and read a config that EXTENDS itself as DEVICE=rocm: the GPU part started.
    (tmp_path / "self.env").write_text("EXTENDS=self.env\n")
    os.mkfifo(tmp_path / "fifo.env")
    for name, problem in (("self.env", "EXTENDS loops"), ("fifo.env", "is a FIFO")):
        argv, env = [str(RUN), str(tmp_path / "out"), "--config", str(tmp_path / name)], {"KIMI_PYTHON": sys.executable}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, **env})
        assert done.returncode == 2 and problem in done.stderr and "nothing was run" in done.stderr, done.stderr
        assert not (tmp_path / "out").exists()


def test_a_gpu_run_without_the_bundle_names_the_command_that_builds_it(tmp_path: Path) -> None:
    ctx = Context(tmp_path, "configs/demo-gpu.env", "configs/demo-gpu-fp8kv.env", gpu=True, python="python3",
                  site=tmp_path / "site", bundle=tmp_path / "no-bundle", deadline=time.monotonic() + 60)  # fmt: skip
    with pytest.raises(StepFailed, match="lab/gpu/prepare.sh"):
        steps.kit(ctx)


def test_the_checkout_fits_beside_the_kits_bundle_in_one_copy_to_the_gpu_host() -> None:
    assert checkout_mib() + BUNDLE_MIB <= LIMIT_MIB


def free_port_pair() -> int:
    for _ in range(50):
        port = free_port()  # below the ephemeral range, as every test server's
        with socket.socket() as second:
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two free ports side by side")


@pytest.mark.server
def test_the_cpu_rehearsal_runs_every_steps_command_lines(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    results = tmp_path / "results"
    # The suite's project cache: the demo models it fabricates (and vLLM's cache) are the ones the other server tests
    # use, not a second copy built for this run.
    env = {**os.environ, "PORT": str(free_port_pair())}
    for part in ("1", "2"):
        done = subprocess.run(
            [str(RUN), str(results), "--config", "configs/demo-cpu.env", "--part", part],
            env=env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        assert f"gpu-run part {part} of 2, CPU REHEARSAL" in done.stderr  # says what it will do
    state = json.loads((results / "run-state.json").read_text())
    assert {name: record["status"] for name, record in state["steps"].items()} == {
        name: "done" for name in ("kit", "fabricate", "serve-first", "serve-second", "qualify", "fp8", "hook-cost",
                                  "summary")
    }  # fmt: skip
    for produced in (
        "fabricate.json", "chat-first.json", "start-times.json", "qualify/report.md", "fp8/kv_scales.json",
        "fp8/dynamic-eager.json", "fp8/calibrated-eager.json", "fp8/dynamic-graphs.json", "fp8.json",
        "hook-cost/graph.json", "hook-cost/no-hook.json", "hook-cost/dynamic-warming.json",
        "hook-cost/dynamic-frozen.json", "hook-cost.json", "summary.json",
    ):  # fmt: skip
        assert (results / produced).is_file(), produced
    assert json.loads((results / "start-times.json").read_text())["first"]["reply"]["completion_tokens"] > 0
    assert state["steps"]["qualify"]["detail"]["exit"] == 0
    # The GPU-only servers' command lines ran as dry runs of the GPU configs, with every variant's overrides.
    dry_runs = [p.read_text() for p in sorted((results / "logs").glob("p2-*dry-run-*.log"))]
    for variant in (*steps.FP8_VARIANTS, *steps.HOOK_MODES):
        assert any("demo-gpu-fp8kv.env --dry-run" in log and "--- exit 0" in log for log in dry_runs), variant
    assert sum("--kv-cache-dtype fp8" in log for log in dry_runs) == len(steps.FP8_VARIANTS) + len(steps.HOOK_MODES)
    hook = json.loads((results / "hook-cost.json").read_text())["modes"]
    assert set(hook["hook_ms_per_decode_step"]) == {"dynamic-warming", "dynamic-frozen"}
    assert hook["graph"]["correctness"]["eager_matches_expected"] is True
    # Nothing left running on the run's ports.
    for port in (int(env["PORT"]), int(env["PORT"]) + 1):
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, port


def test_on_a_bare_host_the_loader_takes_python_dotenv_from_the_kits_bundle(tmp_path: Path) -> None:
    # Why the runner had its own reader: the GPU host's Python has no python-dotenv before the kit is installed.
    import dotenv

    wheels = tmp_path / "bundle" / "project-whl"
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(wheels / "python_dotenv-1.0.0-py3-none-any.whl", "w") as wheel:
        for source in Path(dotenv.__file__).parent.glob("*.py"):
            wheel.write(source, f"dotenv/{source.name}")
    probe = "import sys, pathlib; from kimi_dflash_lab.gpu_run.runner import config_device as d; "
    probe += "print(d(sys.argv[1], pathlib.Path(sys.argv[2])))"
    bare = [sys.executable, "-S", "-c", f"import importlib.util as u; assert not u.find_spec('dotenv'); {probe}"]
    argv = [*bare, "configs/demo-gpu.env", str(tmp_path / "bundle")]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "cuda", done.stderr
