"""Shared fixtures: real vLLM CPU demo servers started through serve.sh, once per test session."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kimi_dflash.paths import CONFIGS_DIR, REPO_ROOT

sys.path.insert(0, str(Path(__file__).parent))  # tests import shared helpers from sibling modules


@dataclass(frozen=True)
class DemoServer:
    base_url: str
    model: str
    metrics_url: str
    log_path: Path
    config_path: Path
    port: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


def serve_env(port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"HOST", "API_KEY"}}
    env["PORT"] = str(port)
    env["KIMI_PYTHON"] = sys.executable
    return env


@pytest.fixture(scope="session")
def demo_server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Start a demo config through `serve.sh --wait`; every server started is stopped at session end."""
    if not _vllm_available():
        pytest.skip("vLLM is not installed (run launchers/setup-cpu.sh)")
    started: list[tuple[Path, dict[str, str]]] = []
    cache: dict[str, DemoServer] = {}

    def start(config_name: str) -> DemoServer:
        if config_name in cache:
            return cache[config_name]
        from kimi_dflash.config.validate import load_config

        config_path = CONFIGS_DIR / config_name
        port = free_port()
        env = serve_env(port)
        log_path = tmp_path_factory.mktemp("logs") / f"{config_path.stem}.log"
        started.append((config_path, env))
        result = subprocess.run([str(REPO_ROOT / "serve.sh"), str(config_path), "--wait", "--log", str(log_path)],
                                env=env, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            raise RuntimeError(f"serve.sh {config_name} --wait failed ({result.returncode}):\n{result.stderr}")
        model = str(load_config(config_path, environ={})["SERVED_MODEL_NAME"])
        base = f"http://127.0.0.1:{port}"
        server = DemoServer(base, model, f"{base}/metrics", log_path, config_path, port)
        cache[config_name] = server
        return server

    yield start
    for config_path, env in started:
        subprocess.run([str(REPO_ROOT / "serve.sh"), str(config_path), "--stop"], env=env, capture_output=True,
                       timeout=120)


@pytest.fixture(scope="session")
def demo_server(demo_server_factory) -> DemoServer:  # type: ignore[no-untyped-def]
    """The CPU demo with DFlash speculative decoding (configs/demo-cpu.env)."""
    return demo_server_factory("demo-cpu.env")


@pytest.fixture(scope="session")
def baseline_demo_server(demo_server_factory) -> DemoServer:  # type: ignore[no-untyped-def]
    """The same demo without speculative decoding (configs/demo-cpu-baseline.env)."""
    return demo_server_factory("demo-cpu-baseline.env")
