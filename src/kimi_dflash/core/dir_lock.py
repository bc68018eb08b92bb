"""One run per output directory: an exclusive, non-blocking flock on a lock file inside it, held for the whole
run; the kernel releases it however the holder exits. The lock file is this user's alone (0600: whoever can open it
can flock it and block every run), opened with O_NOFOLLOW (a planted symlink is refused) and close-on-exec (what the
run starts does not inherit it). A refusal names the pids the kernel says hold it now, never a recorded one."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kimi_dflash.core.atomic_write import owner_name
from kimi_dflash.core.errors import UserError

LOCKS = Path("/proc/locks")


class DirectoryBusy(UserError):
    """Another process holds the directory's lock: nothing was done (exit 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=1)


def holders(fd: int) -> list[str]:
    """The pids holding a lock on the file open at ``fd`` now, from the kernel (empty where it does not say)."""
    info = os.fstat(fd)
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        lines = LOCKS.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return []
    fields = [line.split() for line in lines if "->" not in line]  # "->": a process waiting for it, not holding it
    return sorted({f[4] for f in fields if len(f) > 5 and f[5] == inode and f[4].isdigit() and f[4] != "0"})


@contextmanager
def directory_lock(directory: Path, name: str, *, what: str = "run") -> Iterator[Path]:
    """``DirectoryBusy`` when another process holds it, ``UserError`` (exit 1) when the lock file is a symlink, not
    a regular file, or another user's. ``what`` names the kind of run in messages ("qualify run", "sweep")."""
    path = directory / name
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(
                f"{path}: the lock file is a symbolic link, which is refused; remove it (no run is using it)", 1
            ) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            whose = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"{owner_name(info.st_uid)}'s"
            raise UserError(f"{path}: the lock file is {whose}; remove it (no run of yours is using it)", 1)
        os.fchmod(fd, 0o600)  # one an older version made 0644
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pids = holders(fd)
            held = f"pid {', '.join(pids)}, " if pids else ""
            stop = f", or stop it (kill {' '.join(pids)}) and rerun" if pids else ""
            raise DirectoryBusy(
                f"{directory} is in use by another {what} ({held}lock {path}); nothing was done. Wait for it to "
                f"finish{stop}."
            ) from None
        yield path
    finally:
        os.close(fd)  # releases the lock
