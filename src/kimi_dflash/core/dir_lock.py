"""One run per output directory: an exclusive, non-blocking flock on a lock file inside it, held for the whole
run; the kernel releases it however the holder exits. Opened with O_NOFOLLOW (a planted symlink is refused) and
close-on-exec (what the run starts does not inherit it); the holder writes its pid there for the refusal message.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kimi_dflash.core.errors import UserError


class DirectoryBusy(UserError):
    """Another process holds the directory's lock: nothing was done (exit 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=1)


def _holder(fd: int) -> str:
    """The pid the holder wrote into the lock file ("unknown" while it has not yet)."""
    text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    return text if text.isdigit() else "unknown"


@contextmanager
def directory_lock(directory: Path, name: str, *, what: str = "run") -> Iterator[Path]:
    """``DirectoryBusy`` naming the holder's pid when another process holds it, ``UserError`` when the lock file
    is a symlink or not a regular file. ``what`` names the kind of run in messages ("qualify run", "sweep")."""
    path = directory / name
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(
                f"{path}: the lock file is a symbolic link, which is refused; remove it (no run is using it)", 1
            ) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"{path}: the lock file is not a regular file; remove it (no run is using it)", 1)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            raise DirectoryBusy(
                f"{directory} is in use by another {what} (pid {pid}, lock {path}); nothing was done. Wait for it "
                f"to finish, or stop it (kill {pid}) and rerun."
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock
