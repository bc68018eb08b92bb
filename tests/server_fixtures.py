"""Real vLLM CPU servers started through serve.sh, each config (with its overrides) once per session: the fixtures
tests/conftest.py and lab/tests/conftest.py share, and the helpers tests import from here."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from kimi_dflash.launch.serve_sh import free_port  # noqa: F401  # the tests' servers pick ports as qualify's do
from repo_paths import CONFIGS_DIR, REPO_ROOT


@dataclass(frozen=True)
class DemoServer:
    base_url: str
    model: str
    metrics_url: str
    log_path: Path
    config_path: Path
    port: int
    env: Mapping[str, str]  # what serve.sh ran with (config overrides included)

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def _vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


def serve_env(port: int) -> dict[str, str]:
    # KIMI_DFLASH_PATCHES: test servers run with the plugin, as users' do.
    env = {k: v for k, v in os.environ.items() if k not in {"HOST", "API_KEY", "KIMI_DFLASH_PATCHES"}}
    env["PORT"] = str(port)
    env["KIMI_PYTHON"] = sys.executable
    return env


class ServerFactory:
    """Starts configs through `serve.sh --wait`; the same config with the same overrides is started once. Overrides
    are environment variables: config keys (serve.sh reads them over the file) or anything vLLM's process reads."""

    def __init__(self, logs: pytest.TempPathFactory) -> None:
        self._logs = logs
        self._started: dict[tuple, DemoServer] = {}

    def __call__(
        self, config: str | Path, overrides: Mapping[str, str] | None = None, preflight: bool = True
    ) -> DemoServer:
        from kimi_dflash.config.validate import load_config

        config_path = Path(config) if Path(config).is_absolute() else CONFIGS_DIR / config
        overrides = dict(overrides or {})
        key = (str(config_path), tuple(sorted(overrides.items())), preflight)
        if key in self._started:
            return self._started[key]
        port = free_port()
        env = {**serve_env(port), **overrides}
        log_path = self._logs.mktemp("logs") / f"{config_path.stem}.log"
        command = [str(REPO_ROOT / "serve.sh"), str(config_path), "--wait", "--log", str(log_path)]
        result = subprocess.run(
            command + ([] if preflight else ["--skip-preflight"]),
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if result.returncode != 0:  # serve.sh has stopped what it started
            raise RuntimeError(f"serve.sh {config_path.name} --wait failed ({result.returncode}):\n{result.stderr}")
        model = str(load_config(config_path, environ=env)["SERVED_MODEL_NAME"])
        base = f"http://127.0.0.1:{port}"
        server = DemoServer(base, model, f"{base}/metrics", log_path, config_path, port, env)
        self._started[key] = server
        return server

    def stop(self, server: DemoServer) -> None:
        """Stop a server early (frees the CPU for the next one); a later call with its settings starts it again."""
        self._started = {key: started for key, started in self._started.items() if started is not server}
        subprocess.run(
            [str(REPO_ROOT / "serve.sh"), str(server.config_path), "--stop"],
            env=dict(server.env),
            capture_output=True,
            timeout=120,
            check=False,
        )

    def stop_all(self) -> None:
        for server in list(self._started.values()):
            self.stop(server)


@pytest.fixture(scope="session")
def demo_server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """Start a config through `serve.sh --wait`; every server started is stopped at session end."""
    if not _vllm_available():
        pytest.skip("vLLM is not installed (run launchers/setup-cpu.sh)")
    factory = ServerFactory(tmp_path_factory)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="session")
def demo_server(demo_server_factory: ServerFactory) -> DemoServer:
    """The CPU demo with DFlash speculative decoding (configs/demo-cpu.env: the miniature Kimi K2.6), with each
    request's acceptance on its response (PER_REQUEST_SPEC_METRICS=detailed: one more block in a reply, same
    tokens), so that test_bench_spec_demo_server.py measures this server instead of starting its own."""
    return demo_server_factory("demo-cpu.env", {"PER_REQUEST_SPEC_METRICS": "detailed"})


@pytest.fixture(scope="session")
def baseline_demo_server(demo_server_factory: ServerFactory) -> DemoServer:
    """The same demo without speculative decoding (configs/demo-cpu-baseline.env)."""
    return demo_server_factory("demo-cpu-baseline.env")
