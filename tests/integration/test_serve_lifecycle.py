"""serve.sh process handling against real vLLM: readiness, failure with the log tail, clean stop, exit codes."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from repo_paths import CONFIGS_DIR, REPO_ROOT
from serve_helpers import health_ok
from server_fixtures import free_port, serve_env

pytestmark = pytest.mark.server

SERVE = str(REPO_ROOT / "serve.sh")


def broken_model_config(tmp_path: Path) -> Path:
    """A CPU config whose checkpoint vLLM cannot load (an architecture that does not exist)."""
    model = tmp_path / "broken-model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["NoSuchModelForCausalLM"], "model_type": "nosuch"}')
    config = tmp_path / "broken.env"
    config.write_text(
        f"DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=32\nMODEL_DIR={model}\n"
        "SPECULATIVE_METHOD=none\nTRUST_REMOTE_CODE=false\nTOOL_CALL_PARSER=\n"
        "ENABLE_AUTO_TOOL_CHOICE=false\nREASONING_PARSER=\nREADY_TIMEOUT_S=300\n"
    )
    return config


def test_wait_reports_a_dying_server_with_its_log_tail(tmp_path: Path) -> None:
    env = serve_env(free_port())
    env["KIMI_DFLASH_CACHE"] = str(tmp_path / "cache")
    result = subprocess.run(
        [SERVE, str(broken_model_config(tmp_path)), "--wait", "--skip-preflight"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1
    assert "vLLM exited with code" in result.stderr
    assert "model type `nosuch`" in result.stderr  # the tail of vLLM's own log explains why
    assert not list((tmp_path / "cache" / "run").glob("*.pid"))


def test_foreground_propagates_vllm_exit_code(tmp_path: Path) -> None:
    result = subprocess.run(
        [SERVE, str(broken_model_config(tmp_path)), "--skip-preflight"],
        env=serve_env(free_port()),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode not in (0, 2)  # vLLM's own failure code, not a config error


def test_sigterm_stops_the_server_and_all_its_processes(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "fg.log"
    serve = subprocess.Popen(
        [SERVE, str(CONFIGS_DIR / "demo-cpu.env"), "--log", str(log), "--skip-preflight"],
        env=serve_env(port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 600
        while not health_ok(port):
            assert serve.poll() is None, f"serve.sh exited early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "demo server not ready in 600 s"
            time.sleep(1)
        family = psutil.Process(serve.pid).children(recursive=True)
        assert family, "vLLM should run as a child of serve.sh"

        serve.send_signal(signal.SIGTERM)
        code = serve.wait(timeout=90)
        assert code == 0
        gone, alive = psutil.wait_procs(family, timeout=10)
        assert not alive, f"orphans left: {[p.pid for p in alive]}"
        assert not health_ok(port)
    finally:
        if serve.poll() is None:
            serve.kill()
