"""OUT/results/ and OUT.tar.gz (0600): exactly the files the run wrote, each opened without following a symlink."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import stat
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from kimi_dflash.config.schema import KEY
from kimi_dflash.core.atomic_write import replacing
from kimi_dflash.sweep.state import finished_results


def result_name(config: str, k: str, host: str | None = None) -> str:
    """'production-mi300x-box1-k2.json': config stem, host, k; file-name safe."""
    stem = Path(config).name.removesuffix(".env")
    name = f"{stem}-{host or socket.gethostname()}-qualify-k{k}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) + ".json"


def copy_results(out: Path, config: str, grid: Path | None = None) -> list[Path]:
    """OUT/results/: the results in ``grid`` (default OUT/grid, a shoot-out candidate's own) named for ``config``."""
    target = out / "results"
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for path, result in finished_results(grid or out / "grid"):
        overrides = result.server_config.overrides if result.server_config else {}
        if set(overrides) != {KEY.NUM_SPECULATIVE_TOKENS}:
            continue  # a test-only candidate with other overrides is not a result of this config
        destination = target / result_name(config, overrides[KEY.NUM_SPECULATIVE_TOKENS])
        shutil.copyfile(path, destination)
        copied.append(destination)
    return copied


NO_FOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


@contextlib.contextmanager
def _descriptor(path: str, flags: int) -> Iterator[int]:
    fd = os.open(path, flags)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_beneath(root_fd: int, name: str) -> int | str | None:
    """Every component opened with O_NOFOLLOW; None when absent, else the descriptor or why it is refused."""
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
        return "not a path inside the directory"
    fds: list[int] = []
    try:
        current = root_fd
        for part in parts[:-1]:
            current = os.open(part, NO_FOLLOW | os.O_DIRECTORY, dir_fd=current)
            fds.append(current)
        fd = os.open(parts[-1], NO_FOLLOW, dir_fd=current)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # ENOTDIR: a directory on the way is a symlink (or a file)
            return "a symbolic link, or under one"
        raise
    finally:
        for opened in fds:
            os.close(opened)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return "not a regular file"
    return fd


def archive(out: Path, files: Iterable[str]) -> tuple[Path, list[str]]:
    """(OUT.tar.gz beside OUT, the files refused and why); written to a temporary file, then renamed."""
    out = Path(os.path.abspath(out))
    final = out.with_name(out.name + ".tar.gz")
    refused = []
    with (
        _descriptor(str(out), NO_FOLLOW | os.O_DIRECTORY) as root_fd,
        replacing(final, mode=0o600) as partial,
        tarfile.open(partial, "w:gz") as tar,
    ):
        for name in sorted(set(files)):
            opened = _open_beneath(root_fd, name)
            if isinstance(opened, str):
                refused.append(f"{name} ({opened})")
            elif opened is not None:
                with os.fdopen(opened, "rb") as handle:
                    member = tar.gettarinfo(arcname=f"{out.name}/{name}", fileobj=handle)
                    member.mode = 0o600  # unpacked, it stays as private as OUT
                    tar.addfile(member, handle)
    return final, refused
