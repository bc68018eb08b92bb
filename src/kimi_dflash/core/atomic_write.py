"""Atomic file writes, the project's one implementation: a temporary file beside the target, flushed, renamed over it.
A new file gets mode 0644 (mkstemp's 0600 would hide a shared cache from other users); a replaced file keeps its
mode. Standard library only (core/): the benchmark on a client box writes through it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NEW_FILE_MODE = 0o644


def _mode_for(path: Path, mode: int | None) -> int:
    if mode is not None:
        return mode
    try:
        info = path.lstat()  # a symlink is replaced, not followed: its target's mode is none of our business
    except FileNotFoundError:
        return NEW_FILE_MODE
    return NEW_FILE_MODE if stat.S_ISLNK(info.st_mode) else stat.S_IMODE(info.st_mode)


def _fsync(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def write_beside(path: Path, data: bytes, *, mode: int | None = None, suffix: str = ".tmp") -> Path:
    """Write ``data`` to a new temporary file next to ``path``, flushed to disk, and return it (not yet renamed:
    for callers that replace several files together, e.g. the patcher's all-or-nothing writes)."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, _mode_for(path, mode))
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


@contextlib.contextmanager
def replacing(path: Path | str, *, mode: int | None = None, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path beside ``path`` for writers that need a file name (savefig, downloads, archives): when the
    block ends without an exception, what was written there is flushed and renamed over ``path``."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        _fsync(temporary)
        os.chmod(temporary, _mode_for(path, mode))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_bytes_atomic(path: Path | str, data: bytes, *, mode: int | None = None) -> None:
    with replacing(path, mode=mode) as temporary:
        temporary.write_bytes(data)


def write_text_atomic(path: Path | str, text: str, *, mode: int | None = None) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode)


def write_json_atomic(path: Path | str, document: Any, *, indent: int = 2) -> None:
    """JSON with a trailing newline, keys in the document's order."""
    write_text_atomic(path, json.dumps(document, indent=indent) + "\n")


def publish_directory(staging: Path, live: Path) -> None:
    """Move a completely built directory into place: a reader sees the old directory or the new one. The old one
    is moved aside first (a directory cannot be renamed over a non-empty one) and removed afterwards."""
    os.chmod(staging, 0o755)  # mkdtemp makes it owner-only
    retired = None
    if live.exists():
        retired = Path(tempfile.mkdtemp(prefix=".retired-", dir=live.parent))
        os.replace(live, retired / live.name)
    os.replace(staging, live)
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True)
