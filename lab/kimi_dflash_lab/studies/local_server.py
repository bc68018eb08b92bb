"""Start a vLLM server from a config file in this process and hold its handle (the KV hook-cost instrument).

The product starts servers through serve.sh (launch/cli.py; workflows through launch/serve_sh.py); this goes the
same way without the preflight and the patches: config file -> validated Config -> launch.prepare (the plan serve
would serve) -> launch/server.start_and_wait. Callers are on the CPU build, where the plugin applies what a plan
needs at runtime.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

from kimi_dflash.config.problems import ConfigError
from kimi_dflash.config.validate import load_config
from kimi_dflash.launch.prepare import prepare
from kimi_dflash.launch.server import start_and_wait, stop_process_group, tail
from kimi_dflash.plan import LaunchPlan


class ServerStartError(RuntimeError):
    """The config was refused, or vLLM died or was not ready in time (the message holds the log tail)."""


@dataclass
class LocalServer:
    plan: LaunchPlan
    process: Popen[bytes]
    log_path: Path

    @property
    def base_url(self) -> str:
        return self.plan.base_url

    @property
    def port(self) -> int:
        return self.plan.port

    @property
    def model(self) -> str:
        return self.plan.served_model_name

    def stop(self) -> int:
        """SIGTERM vLLM's process group (workers included), SIGKILL what is left after the grace period."""
        return stop_process_group(self.process)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def start_local_server(
    config_path: Path,
    log_path: Path,
    *,
    overrides: Mapping[str, str] | None = None,
    process_env: Mapping[str, str] | None = None,
    say: Callable[[str], None] = _stderr,
) -> LocalServer:
    """Start the server ``config_path`` describes and return once it serves (READY_TIMEOUT_S bounds the wait).

    ``overrides``: config keys read over the file (as serve.sh reads them from the environment); the process
    environment is not consulted for them. ``process_env``: variables for vLLM's processes that are not config
    keys (OMP_NUM_THREADS, PYTHONPATH, the CPU test aid KIMI_DFLASH_KV_EMULATE_FP8), set over the plan's.
    """
    try:
        config = load_config(config_path, environ=dict(overrides or {}))
    except ConfigError as error:
        raise ServerStartError(f"{config_path}: " + "; ".join(p.render() for p in error.problems)) from None
    prepared = prepare(config, create=True, say=say)
    errors = [p for p in prepared.problems if p.severity == "error"]
    if errors:
        raise ServerStartError(f"{config_path}: " + "; ".join(p.render() for p in errors))
    config, plan = prepared.config, prepared.plan
    plan = dataclasses.replace(plan, env={**plan.env, **(process_env or {})})
    timeout_s = float(config.typed.ready_timeout_s)
    process = start_and_wait(plan, log_path, log_path.with_suffix(".pid"), timeout_s, config.typed.api_key, say)
    if process is None:
        raise ServerStartError(
            f"vLLM for {config_path} did not become ready; last lines of {log_path}:\n{tail(log_path)}"
        )
    return LocalServer(plan, process, log_path)
