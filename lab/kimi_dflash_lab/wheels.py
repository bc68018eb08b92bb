"""vLLM releases' Python sources, read off the package index for the lab's matrix and the wheel-reading tests.

vLLM's code stays out of this repository. A vLLM wheel is 240-340 MB, almost all of it compiled kernels; its `.py`
members are 6-12 MB compressed and lie in a few dozen contiguous runs of the archive. The package index
(files.pythonhosted.org) answers HTTP range requests, so `sparse_wheel` fetches the zip's central directory, then
only the byte runs that hold the wanted members, and writes them at their original offsets into a sparse file of the
wheel's full size under cache_root()/wheels/sparse/. `zipfile` reads that file like the real wheel for every member
fetched (each member's CRC is checked); the holes, where the kernels were, are never read and take no disk space. A
full wheel downloaded with `pip download --no-deps` (kimi_dflash.core.wheels) is used when already cached, and is the
fallback when the index does not answer range requests. `vllm_sources` extracts only the files a caller reads into
cache_root()/vllm-src/<version>/vllm/. Every step is skipped when already cached.

    wheel = source_wheel("0.33.0")                                  # a zip VllmSource.from_wheel can read
    root = vllm_sources("0.20.0", ["v1/attention/selector.py"])   # -> .../vllm-src/0.20.0/vllm
"""

from __future__ import annotations

import os
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core import http
from kimi_dflash.core.atomic_write import replacing, write_bytes_atomic, write_json_atomic
from kimi_dflash.core.paths import cache_root
from kimi_dflash.core.wheels import WheelError, download_wheel, find_cached_wheel

EOCD_SIGNATURE = b"PK\x05\x06"
TAIL_BYTES = 1 << 16  # the end-of-central-directory record sits in the last 64 KiB (22 bytes + comment)
MERGE_GAP = 256 << 10  # fetch two runs as one when fewer than this many bytes separate them
TIMEOUT_S = 120.0
USER_AGENT = "kimi-k26-dflash (vLLM source reader)"
# Always extracted: they make the directory recognisable as a vllm package and carry the version.
PACKAGE_FILES = ("__init__.py", "_version.py")


class RangeNotSupported(RuntimeError):
    """The server ignored the Range header (answered 200 with the whole file): fall back to a full download."""


@dataclass(frozen=True)
class WheelLink:
    url: str
    size: int
    filename: str


# --- a wheel's members by range requests into a sparse file --------------------------------------------


def python_sources(name: str) -> bool:
    """The members the source reader needs: vLLM's Python files and the wheel's metadata."""
    return (name.startswith("vllm/") and name.endswith(".py")) or ".dist-info/" in name


def fetch_range(url: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of `url` through one HTTP range request."""
    headers = {"Range": f"bytes={start}-{end - 1}", "User-Agent": USER_AGENT}
    reply = http.request(url, headers=headers, timeout_s=TIMEOUT_S, max_bytes=end - start)
    if reply.status != 206:
        raise RangeNotSupported(f"{url} answered {reply.status} to a range request")
    data = reply.body
    if len(data) != end - start:
        raise OSError(f"{url}: asked for {end - start} bytes at {start}, got {len(data)}")
    return data


def _central_directory(tail: bytes, size: int) -> tuple[int, int]:
    """(offset, length) of the central directory, from the end-of-central-directory record in `tail`."""
    at = tail.rfind(EOCD_SIGNATURE)
    if at < 0:
        raise zipfile.BadZipFile("no end-of-central-directory record in the last 64 KiB")
    cd_size, cd_offset = struct.unpack("<II", tail[at + 12 : at + 20])
    if cd_offset == 0xFFFFFFFF or cd_offset + cd_size > size:
        raise zipfile.BadZipFile("zip64 or inconsistent central directory: not a wheel this reader handles")
    return cd_offset, cd_size


def member_runs(infos: list[zipfile.ZipInfo], wanted: Callable[[str], bool], size: int) -> list[tuple[int, int]]:
    """Byte ranges covering the local header and data of every wanted member, neighbours merged."""
    starts = sorted(i.header_offset for i in infos)
    next_start = {start: nxt for start, nxt in zip(starts, [*starts[1:], size], strict=True)}
    spans = sorted((i.header_offset, next_start[i.header_offset]) for i in infos if wanted(i.filename))
    runs: list[tuple[int, int]] = []
    for start, end in spans:
        if runs and start - runs[-1][1] <= MERGE_GAP:
            runs[-1] = (runs[-1][0], max(runs[-1][1], end))
        else:
            runs.append((start, end))
    return runs


def sparse_wheel(
    link: WheelLink,
    dest_dir: Path,
    wanted: Callable[[str], bool] = python_sources,
    fetch: Callable[[str, int, int], bytes] = fetch_range,
) -> Path:
    """`dest_dir/<filename>`: a sparse copy of the wheel holding the central directory and every wanted member,
    each verified (CRC) before the file is published. Returns at once when it is already there."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / link.filename
    marker = target.with_name(target.name + ".sparse.json")
    if target.is_file() and marker.is_file():
        return target
    with replacing(target, mode=0o644) as tmp:  # the cache is shared: readable by all
        with tmp.open("r+b") as handle:
            handle.truncate(link.size)
            tail_start = max(0, link.size - TAIL_BYTES)
            tail = fetch(link.url, tail_start, link.size)
            cd_offset, cd_size = _central_directory(tail, link.size)
            pieces = [(tail_start, tail)]
            if cd_offset < tail_start:
                pieces.append((cd_offset, fetch(link.url, cd_offset, tail_start)))
            for offset, data in pieces:
                handle.seek(offset)
                handle.write(data)
            handle.flush()
            with zipfile.ZipFile(tmp) as archive:
                infos = archive.infolist()
            runs = member_runs(infos, wanted, cd_offset)
            for start, end in runs:
                handle.seek(start)
                handle.write(fetch(link.url, start, end))
        with zipfile.ZipFile(tmp) as archive:
            members = [i for i in archive.infolist() if wanted(i.filename)]
            for info in members:
                try:
                    archive.read(info)  # CRC-checked: nothing corrupt or half-fetched is ever published
                except (zipfile.BadZipFile, zlib.error, EOFError) as error:
                    raise zipfile.BadZipFile(
                        f"{link.filename}: {info.filename} arrived corrupted ({error}); nothing was cached, run again"
                    ) from error
        fetched = sum(end - start for start, end in runs) + len(tail) + max(0, tail_start - cd_offset)
    # Written after the wheel: a marker means the file beside it is complete.
    write_json_atomic(
        marker,
        {
            "url": link.url,
            "size": link.size,
            "members": len(members),
            "fetched_bytes": fetched,
            "requests": len(runs) + len(pieces),
        },
    )
    return target


# --- finding wheels on the index (PEP 691 JSON simple API) ---------------------------------------------

_VERSION_RE = re.compile(r"^\d+(\.\d+)*$")


def index_url() -> str:
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def project_files(project: str, index: str | None = None) -> list[dict]:
    """The `files` list of the index's JSON page for `project` (one request)."""
    url = f"{index or index_url()}/{project}/"
    reply = http.request(
        url, headers={"Accept": "application/vnd.pypi.simple.v1+json", "User-Agent": USER_AGENT}, timeout_s=TIMEOUT_S
    )
    if reply.status != 200:
        raise OSError(f"{url} answered HTTP {reply.status}")
    return list(reply.json().get("files", []))


def parse_wheel_name(filename: str) -> tuple[str, str, int] | None:
    """(version, platform tag, build number) of a `dist-version[-build]-py-abi-platform.whl` name."""
    parts = filename[: -len(".whl")].split("-") if filename.endswith(".whl") else []
    if len(parts) == 5:
        return parts[1], parts[4], 0
    if len(parts) == 6 and parts[2].isdigit():
        return parts[1], parts[5], int(parts[2])
    return None


def release_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def linux_wheels(files: list[dict], platform: str = "x86_64") -> dict[str, WheelLink]:
    """Final release -> its manylinux `platform` wheel (the highest build number when re-uploaded)."""
    best: dict[str, tuple[int, WheelLink]] = {}
    for entry in files:
        parsed = parse_wheel_name(str(entry.get("filename", "")))
        if parsed is None or entry.get("yanked"):
            continue
        version, tag, build = parsed
        if not _VERSION_RE.match(version) or "manylinux" not in tag or platform not in tag:
            continue
        link = WheelLink(str(entry["url"]), int(entry.get("size") or 0), str(entry["filename"]))
        if version not in best or build > best[version][0]:
            best[version] = (build, link)
    return {version: link for version, (_, link) in sorted(best.items(), key=lambda kv: release_key(kv[0]))}


def released_wheels(since: str = "0.20.0") -> dict[str, WheelLink]:
    """Every final vLLM release from `since` to the newest on the index -> its manylinux x86_64 wheel."""
    floor = release_key(since)
    return {v: link for v, link in linux_wheels(project_files("vllm")).items() if release_key(v) >= floor}


# --- a release's sources, cached -----------------------------------------------------------------------


def source_wheel(version: str, cache: Path | None = None, links: dict[str, WheelLink] | None = None) -> Path:
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
            raise WheelError(f"vllm {version} has no manylinux x86_64 wheel on {index_url()}")
        return sparse_wheel(link, sparse_dir)
    except RangeNotSupported:
        return download_wheel(version, cache)


def vllm_sources(version: str, members: Iterable[str], cache: Path | None = None) -> Path:
    """A directory `<cache>/vllm-src/<version>/vllm` holding `members` (paths inside the vllm package, e.g.
    "v1/attention/selector.py") extracted from the wheel. Missing members of the wheel raise WheelError."""
    root = (cache or cache_root()) / "vllm-src" / version / "vllm"
    wanted = list(dict.fromkeys([*PACKAGE_FILES, *members]))
    missing = [m for m in wanted if not (root / m).is_file()]
    if not missing:
        return root
    wheel = source_wheel(version, cache)
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
