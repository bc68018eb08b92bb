"""Fetch vLLM wheels from the package index once, and read their sources in place.

vLLM's code stays out of this repository: tests and tools read the wheel they need from the package index and
keep it under cache_root()/wheels. By default only its Python sources are fetched, with HTTP range requests, into
a sparse copy of the wheel (cache_root()/wheels/sparse/, ~6-14 MB per release instead of 240-340 MB; see
remote_wheel.py); a full wheel downloaded with `pip download --no-deps` is used when already cached, and is the
fallback when the index does not answer range requests. `vllm_sources` extracts only the files a caller reads
into cache_root()/vllm-src/<version>/vllm/. Every step is skipped when already cached.

    wheel = source_wheel("0.33.0")                                  # a zip VllmSource.from_wheel can read
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

from kimi_dflash.core.atomic_write import write_bytes_atomic
from kimi_dflash.core.paths import cache_root
from kimi_dflash.patcher import remote_wheel

# Always extracted: they make the directory recognisable as a vllm package and carry the version.
PACKAGE_FILES = ("__init__.py", "_version.py")


class WheelError(RuntimeError):
    """The wheel could not be downloaded or does not hold the requested files."""


def find_cached_wheel(version: str, cache: Path | None = None, dist: str = "vllm") -> Path | None:
    wheels = sorted(((cache or cache_root()) / "wheels").glob(f"{dist.replace('-', '_')}-{version}-*.whl"))
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
            raise WheelError(f"`{' '.join(command)}` failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
        target = wheels_dir / wheels[0].name
        os.replace(wheels[0], target)
    return target


def released_wheels(since: str = "0.20.0") -> dict[str, remote_wheel.WheelLink]:
    """Every final vLLM release from `since` to the newest on the index -> its manylinux x86_64 wheel."""
    links = remote_wheel.linux_wheels(remote_wheel.project_files("vllm"))
    floor = remote_wheel.release_key(since)
    return {v: link for v, link in links.items() if remote_wheel.release_key(v) >= floor}


def source_wheel(
    version: str, cache: Path | None = None, links: dict[str, remote_wheel.WheelLink] | None = None
) -> Path:
    """A wheel file holding vllm==version's Python sources: the full wheel if cached, else a sparse copy with
    only the sources, fetched by range requests (falls back to the full download if the index refuses ranges)."""
    full = find_cached_wheel(version, cache)
    if full is not None:
        return full
    sparse_dir = (cache or cache_root()) / "wheels" / "sparse"
    cached = sorted(sparse_dir.glob(f"vllm-{version}-*.whl"))
    if cached and cached[-1].with_name(cached[-1].name + ".sparse.json").is_file():
        return cached[-1]
    try:
        link = (links or released_wheels(version)).get(version)
        if link is None:
            raise WheelError(f"vllm {version} has no manylinux x86_64 wheel on {remote_wheel.index_url()}")
        return remote_wheel.sparse_wheel(link, sparse_dir)
    except remote_wheel.RangeNotSupported:
        return download_wheel(version, cache)


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
    wheel = source_wheel(version, cache) if dist == "vllm" else download_wheel(version, cache, dist)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        absent = [m for m in missing if f"vllm/{m}" not in names and m not in PACKAGE_FILES]
        if absent:
            raise WheelError(f"{wheel.name} has no {', '.join('vllm/' + m for m in absent)}")
        for member in missing:
            name = f"vllm/{member}"
            if name not in names:
                continue  # an optional package file (e.g. _version.py) this build lacks
            write_bytes_atomic(root / member, archive.read(name))
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
