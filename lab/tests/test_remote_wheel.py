"""Reading a wheel's Python sources by range requests into a sparse file (kimi_dflash_lab.wheels).

Fast tests serve a locally built zip through the same `fetch(url, start, end)` interface the HTTP reader has;
the slow one reads a real vLLM wheel from the package index and checks it against pip's full download when that
is cached.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from kimi_dflash_lab import wheels
from kimi_dflash_lab.wheels import WheelLink, linux_wheels, sparse_wheel


def build_wheel(path: Path) -> dict[str, bytes]:
    """A wheel-shaped zip: Python files around a large incompressible 'kernel' that must never be fetched."""
    members = {
        "vllm/__init__.py": b"__version__ = '9.9.9'\n",
        "vllm/_C.abi3.so": os.urandom(3 << 20),
        "vllm/config/__init__.py": b"x = 1\n" * 2000,
        "vllm/kernels.so": os.urandom(2 << 20),
        "vllm/platforms/rocm.py": b"def f():\n    return 2\n" * 500,
        "vllm-9.9.9.dist-info/METADATA": b"Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n",
    }
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return members


class LocalIndex:
    """fetch(url, start, end) over a local file, counting requests and bytes."""

    def __init__(self, path: Path, corrupt_at: int | None = None) -> None:
        self.data = path.read_bytes()
        self.requests = 0
        self.bytes = 0
        self.corrupt_at = corrupt_at

    def __call__(self, url: str, start: int, end: int) -> bytes:
        self.requests += 1
        self.bytes += end - start
        chunk = bytearray(self.data[start:end])
        if self.corrupt_at is not None and start <= self.corrupt_at < end:
            chunk[self.corrupt_at - start] ^= 0xFF
        return bytes(chunk)


def test_only_the_python_members_are_fetched_and_read_back_identically(tmp_path: Path) -> None:
    source = tmp_path / "index" / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    source.parent.mkdir()
    members = build_wheel(source)
    index = LocalIndex(source)
    link = WheelLink("https://index/x.whl", source.stat().st_size, source.name)
    sparse = sparse_wheel(link, tmp_path / "cache", fetch=index)
    with zipfile.ZipFile(sparse) as archive:
        for name, data in members.items():
            if name.endswith(".py") or ".dist-info/" in name:
                assert archive.read(name) == data
    assert index.bytes < 1 << 20 < source.stat().st_size  # the 5 MB of kernels stayed on the index
    assert os.stat(sparse).st_size == source.stat().st_size and oct(os.stat(sparse).st_mode)[-3:] == "644"
    again = LocalIndex(source)
    assert sparse_wheel(link, tmp_path / "cache", fetch=again) == sparse and again.requests == 0  # cached


def test_a_corrupted_byte_is_caught_and_nothing_is_published(tmp_path: Path) -> None:
    source = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    build_wheel(source)
    with zipfile.ZipFile(source) as archive:
        info = archive.getinfo("vllm/platforms/rocm.py")
    inside = info.header_offset + 30 + len(info.filename) + len(info.extra) + 5
    link = WheelLink("https://index/x.whl", source.stat().st_size, source.name)
    with pytest.raises(zipfile.BadZipFile):
        sparse_wheel(link, tmp_path / "cache", fetch=LocalIndex(source, corrupt_at=inside))
    assert list((tmp_path / "cache").iterdir()) == []


def test_the_index_listing_keeps_final_linux_wheels_and_the_newest_build() -> None:
    def entry(name: str, **extra: object) -> dict:
        return {"filename": name, "url": f"https://files/{name}", "size": 10, **extra}

    files = [
        entry("vllm-0.21.0-cp38-abi3-manylinux_2_24_x86_64.whl"),
        entry("vllm-0.21.0-1-cp38-abi3-manylinux_2_24_x86_64.whl"),
        entry("vllm-0.21.0-cp38-abi3-manylinux_2_24_aarch64.whl"),
        entry("vllm-0.22.0rc1-cp38-abi3-manylinux_2_28_x86_64.whl"),
        entry("vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl", yanked=True),
        entry("vllm-0.9.2-cp38-abi3-manylinux1_x86_64.whl"),
        entry("vllm-0.21.0.tar.gz"),
    ]
    links = linux_wheels(files)
    assert list(links) == ["0.9.2", "0.21.0"]  # release order, not string order
    assert links["0.21.0"].filename == "vllm-0.21.0-1-cp38-abi3-manylinux_2_24_x86_64.whl"


def test_a_server_that_ignores_ranges_falls_back_to_the_full_download(tmp_path: Path, monkeypatch) -> None:
    def refuse(*args: object, **kwargs: object) -> Path:
        raise wheels.RangeNotSupported("answered 200")

    full = tmp_path / "full.whl"
    monkeypatch.setattr(wheels, "sparse_wheel", refuse)
    monkeypatch.setattr(wheels, "download_wheel", lambda version, cache=None, dist="vllm": full)
    link = WheelLink("https://index/x.whl", 1, "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl")
    assert wheels.source_wheel("9.9.9", tmp_path, links={"9.9.9": link}) == full
