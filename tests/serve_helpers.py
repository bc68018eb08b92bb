"""Shared test helpers for config files and serve.sh runs (a fixtures module: test files import it, never each
other)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from in_process import run_verb
from repo_paths import REPO_ROOT


def write(tmp_path: Path, text: str, name: str = "test.env") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _serve_env(env: dict[str, str] | None) -> dict[str, str]:
    full_env = {k: v for k, v in os.environ.items() if k not in {"PORT", "HOST", "API_KEY"}}
    full_env.update(env or {})
    full_env["KIMI_PYTHON"] = sys.executable
    return full_env


def run_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO_ROOT / "serve.sh"), *args], capture_output=True, text=True, env=_serve_env(env), timeout=120
    )


def serve_in_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """What ``run_serve`` returns, with serve's entry function run in this process (in_process.py): for the tests of
    what serve decides and says, not of the launcher script or a started server."""
    return run_verb(
        "kimi_dflash.launch.cli", args, argv0=str(REPO_ROOT / "serve.sh"), prog="serve.sh", env=_serve_env(env)
    )


def tiny_cpu_config(tmp_path: Path) -> Path:
    """A CPU config that validates and passes the path checks without a real checkpoint: vLLM, if started, fails to
    load it (for tests that stop at or before the start)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["NoSuchModelForCausalLM"], "model_type": "nosuch"}')
    config = tmp_path / "tiny.env"
    config.write_text(
        f"DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=32\nMODEL_DIR={model}\n"
        "SPECULATIVE_METHOD=none\nTRUST_REMOTE_CODE=false\nTOOL_CALL_PARSER=\nENABLE_AUTO_TOOL_CHOICE=false\n"
        "REASONING_PARSER=\nREADY_TIMEOUT_S=300\n"
    )
    return config


# What the project's vLLM plugin prints when it loads: every line it logs starts with one of these prefixes
# (patcher/runtime.py, kvscale/runtime.py), right after vLLM's "[file.py:line] " log header. Matching the message
# start, not the bare project name, matters: the default cache (~/.cache/kimi-dflash/...) puts "kimi-dflash" into
# every model path vLLM logs.
PLUGIN_LOG_LINE = re.compile(r"\] kimi-dflash (?:patches|kv scales)\b")


def plugin_log_lines(log_text: str) -> list[str]:
    """The lines of a vLLM log that the project's plugin wrote (empty when vLLM never loaded it)."""
    return [line for line in log_text.splitlines() if PLUGIN_LOG_LINE.search(line)]


def health_ok(port: int) -> bool:
    """Whether a server answers /health with 200 on this port of the loopback."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
