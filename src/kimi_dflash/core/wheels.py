"""A released wheel from the package index, downloaded once with pip into cache_root()/wheels and then reused
(SpecForge's schema in drafter_training; the lab's fallback when the index refuses range requests). Stdlib only."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kimi_dflash.core.paths import cache_root


class WheelError(RuntimeError):
    """The wheel could not be downloaded or does not hold the requested files."""


def find_cached_wheel(version: str, cache: Path | None = None, dist: str = "vllm") -> Path | None:
    wheels = sorted(((cache or cache_root()) / "wheels").glob(f"{dist.replace('-', '_')}-{version}-*.whl"))
    return wheels[-1] if wheels else None


def download_wheel(version: str, cache: Path | None = None, dist: str = "vllm") -> Path:
    if (cached := find_cached_wheel(version, cache, dist)) is not None:
        return cached
    wheels_dir = (cache or cache_root()) / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    # Download into a private directory first: a half-downloaded wheel never looks cached.
    with tempfile.TemporaryDirectory(dir=wheels_dir, prefix=".download-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
        command += ["--progress-bar", "off", "-d", tmp, f"{dist}=={version}"]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise WheelError(f"`{' '.join(command)}` failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
        target = wheels_dir / wheels[0].name
        os.replace(wheels[0], target)
    return target
