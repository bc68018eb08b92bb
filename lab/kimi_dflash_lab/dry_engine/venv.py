"""`python -m kimi_dflash_lab dry-engine-venv VERSION`: a separate virtual environment holding vLLM VERSION's
CUDA wheel (and the torch it pins), so that the dry engine can run that release's start-up code on a simulated
GPU from this CPU machine (`dry-engine CONFIG --vllm VERSION`).

    <project cache>/venvs/vllm-VERSION/      bin/python, the wheels pip resolved (a few GB: torch + CUDA libraries)
    <project cache>/venvs/vllm-VERSION/.kimi-dflash-venv.json   written last: versions and how long the build took

Opt-in and never part of the fast loop: it downloads a few GB from the package index. A directory without the
marker file (an interrupted build) is removed and built again. No GPU is needed to import a CUDA build of torch or
vLLM: the CUDA libraries come as pip wheels.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.options import declare, option, run

MARKER = ".kimi-dflash-venv.json"
# What each release pins (read from its wheel's requirements): the torch its CUDA extensions were built against.
TORCH_PINS = {"0.25.0": "2.11.0", "0.26.0": "2.11.0"}


def venvs_root() -> Path:
    from kimi_dflash.core.paths import cache_root

    return cache_root() / "venvs"


def venv_dir(version: str, root: Path | None = None) -> Path:
    return (root or venvs_root()) / f"vllm-{version}"


def venv_python(version: str, root: Path | None = None) -> Path | None:
    """The venv's interpreter when a complete build of it exists, else None."""
    directory = venv_dir(version, root)
    python = directory / "bin" / "python"
    return python if (directory / MARKER).is_file() and python.exists() else None


def venv_vllm_dir(version: str, root: Path | None = None) -> Path | None:
    """The vllm package directory inside the venv (for the static rules to read the same release)."""
    found = sorted(venv_dir(version, root).glob("lib/python3*/site-packages/vllm"))
    return found[0] if found else None


def requirements(version: str) -> list[str]:
    pins = [f"vllm=={version}"]
    if version in TORCH_PINS:
        pins.append(f"torch=={TORCH_PINS[version]}")
    return pins


def build(version: str, root: Path | None = None, base_python: str = sys.executable, force: bool = False) -> Path:
    """Create (or reuse) the venv for `version`; returns its interpreter. Raises RuntimeError naming the step."""
    directory = venv_dir(version, root)
    ready = venv_python(version, root)
    if ready is not None and not force:
        return ready
    if directory.exists():
        shutil.rmtree(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    steps = (
        [base_python, "-m", "venv", str(directory)],
        [str(directory / "bin" / "python"), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
        [str(directory / "bin" / "python"), "-m", "pip", "install", "--quiet", *requirements(version)],
    )
    for step in steps:
        print(f"dry-engine-venv: {' '.join(step)}", file=sys.stderr, flush=True)
        result = subprocess.run(step, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"`{' '.join(step)}` exited with code {result.returncode}; {directory} is incomplete")
    python = directory / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('vllm'), m.version('torch'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        raise RuntimeError(f"the new venv cannot read its vLLM and torch versions: {probe.stderr.strip()[-500:]}")
    vllm_version, torch_version = probe.stdout.split()
    marker = {
        "vllm": vllm_version,
        "torch": torch_version,
        "build_seconds": round(time.monotonic() - started, 1),
        "size_bytes": sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink()),
    }
    (directory / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    return python


@dataclass(kw_only=True)
class Options:
    version: str = option("the vLLM release, e.g. 0.26.0", positional=True, required=True)
    root: Path | None = option("where venvs live (default: <project cache>/venvs)")
    force: bool = option("rebuild even a complete venv")


add_cli_args = declare(Options, __doc__)


def main(args: Options) -> int:
    try:
        python = build(args.version, args.root, force=args.force)
    except (RuntimeError, OSError) as error:
        print(f"dry-engine-venv: {error}", file=sys.stderr)
        return 1
    marker = json.loads((python.parent.parent / MARKER).read_text(encoding="utf-8"))
    print(f"{python}  (vLLM {marker['vllm']}, torch {marker['torch']}, built in {marker['build_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab dry-engine-venv"))
