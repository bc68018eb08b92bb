"""Fetch vLLM wheels from the package index once, and read their sources in place.

vLLM's code stays out of this repository: tests and tools download the wheel they need with pip
(`pip download --no-deps`), keep it under cache_root()/wheels, and extract only the files they
read into cache_root()/vllm-src/<version>/vllm/. Both steps are skipped when already cached.

    root = vllm_sources("0.20.0", ["v1/attention/selector.py"])   # -> .../vllm-src/0.20.0/vllm
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from kimi_dflash.paths import cache_root

# Always extracted: they make the directory recognisable as a vllm package and carry the version.
PACKAGE_FILES = ("__init__.py", "_version.py")


class WheelError(RuntimeError):
    """The wheel could not be downloaded or does not hold the requested files."""


def find_cached_wheel(
    version: str, cache: Path | None = None, dist: str = "vllm"
) -> Path | None:
    wheels = sorted(
        ((cache or cache_root()) / "wheels").glob(
            f"{dist.replace('-', '_')}-{version}-*.whl"
        )
    )
    return wheels[-1] if wheels else None


def download_wheel(version: str, cache: Path | None = None, dist: str = "vllm") -> Path:
    """The wheel for dist==version, downloaded with pip once and then reused."""
    cached = find_cached_wheel(version, cache, dist)
    if cached is not None:
        return cached
    wheels_dir = (cache or cache_root()) / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    # Download into a private directory first: a half-downloaded wheel never looks cached.
    with tempfile.TemporaryDirectory(dir=wheels_dir, prefix=".download-") as tmp:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
            "--progress-bar",
            "off",
            "-d",
            tmp,
            f"{dist}=={version}",
        ]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise WheelError(
                f"`{' '.join(command)}` failed (exit {done.returncode}): {done.stderr.strip()[-800:]}"
            )
        target = wheels_dir / wheels[0].name
        os.replace(wheels[0], target)
    return target


def vllm_sources(
    version: str,
    members: Iterable[str],
    cache: Path | None = None,
    dist: str = "vllm",
) -> Path:
    """A directory `<cache>/vllm-src/<version>/vllm` holding `members` (paths inside the vllm
    package, e.g. "v1/attention/selector.py") extracted from the wheel. Missing members of the
    wheel raise WheelError."""
    root = (cache or cache_root()) / "vllm-src" / version / "vllm"
    wanted = list(dict.fromkeys([*PACKAGE_FILES, *members]))
    missing = [m for m in wanted if not (root / m).is_file()]
    if not missing:
        return root
    wheel = download_wheel(version, cache, dist)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        absent = [
            m for m in missing if f"vllm/{m}" not in names and m not in PACKAGE_FILES
        ]
        if absent:
            raise WheelError(
                f"{wheel.name} has no {', '.join('vllm/' + m for m in absent)}"
            )
        for member in missing:
            name = f"vllm/{member}"
            if name not in names:
                continue  # an optional package file (e.g. _version.py) this build lacks
            target = root / member
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
            with os.fdopen(fd, "wb") as handle:
                handle.write(archive.read(name))
            os.replace(tmp, target)
    return root


def writable_copy(source_root: Path, destination: Path) -> Path:
    """Copy an extracted (or installed) vllm tree, only the files the registry reads, so a test
    can patch it without touching the cache or site-packages."""
    from kimi_dflash.patcher.registry import source_paths

    target = destination / "vllm"
    for member in (*PACKAGE_FILES, *source_paths()):
        src = source_root / member
        if src.is_file():
            (target / member).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target / member)
    (target / "v1").mkdir(parents=True, exist_ok=True)
    return target
