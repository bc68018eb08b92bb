"""Start and stop a vLLM CPU server for a local model (tests and CPU experiments of the KV-scale path).

The server runs in its own session (process group) so stopping it also ends vLLM's engine and
worker processes; it binds to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kimi_dflash.paths import cache_root


class ServerStartError(RuntimeError):
    pass


@dataclass
class LocalServer:
    port: int
    log_path: Path
    process: subprocess.Popen
    model: str
    extra_args: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server's process group, then SIGKILL whatever is left."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        try:  # workers can outlive the API server; the group id is the server's pid
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.process.poll() is None:
            self.process.wait(timeout=timeout)


def cpu_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(cache_root() / "vllm"),
    })
    env.update(extra or {})
    return env


def start_server(model: str | Path, port: int, log_path: Path, *, env: Mapping[str, str] | None = None,
                 args: Sequence[str] = (), timeout: float = 300.0) -> LocalServer:
    """Start ``vllm serve MODEL`` (CPU build, eager) and wait for /health; raise with the log tail on failure."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "kimi_dflash.vllm_entry", "serve", str(model), "--host", "127.0.0.1",
               "--port", str(port), "--enforce-eager", *args]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=cpu_env(env),
                                   start_new_session=True)
    server = LocalServer(port, log_path, process, str(model), list(args))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = "\n".join(server.log_text().splitlines()[-40:])
            server.stop()
            raise ServerStartError(f"vLLM exited with {process.returncode} before it was healthy:\n{tail}")
        try:
            with urllib.request.urlopen(f"{server.base_url}/health", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    server.stop()
    raise ServerStartError(f"vLLM did not become healthy within {timeout:.0f}s; log: {log_path}")
