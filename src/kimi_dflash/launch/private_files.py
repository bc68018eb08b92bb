"""The launcher's own files in the project cache (port locks, pid records, the default log): in directories only
this user can write, opened without following symlinks (a planted symlink made root write anywhere:
docs/security.md). A sticky bit does not make a shared directory ours: others still create names in it."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from kimi_dflash.core.atomic_write import owner_name
from kimi_dflash.core.envvars import CACHE as CACHE_ENV

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_OTHERS_ANY = 0o077


class UnsafeLocation(RuntimeError):
    """A directory or file of the launcher's that another user could control; the message says how to fix it."""


def private_dir(path: Path, *, follow_symlinks: bool = True) -> Path:
    """``path`` as a directory only this user can write: created (mode 0700) when missing, else checked.
    UnsafeLocation when it is not a directory, belongs to another user, or group or others may write it.
    ``follow_symlinks=False`` refuses a symlink (for the directories the launcher itself creates in the cache)."""
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        info = path.stat() if follow_symlinks else path.lstat()
    except OSError as error:
        raise UnsafeLocation(
            f"cannot create {path} ({error.strerror or error}); point {CACHE_ENV} at a directory of your own"
        ) from None
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeLocation(f"{path} is a symbolic link, not a directory the launcher made; remove it (rm {path})")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeLocation(f"{path} is not a directory; remove it, or point {CACHE_ENV} elsewhere")
    if info.st_uid != os.geteuid():
        raise UnsafeLocation(
            f"{path} belongs to {owner_name(info.st_uid)}, not to you ({owner_name(os.geteuid())}): files the launcher "
            f"keeps there could be replaced by its owner. Point {CACHE_ENV} at a directory of your own, or have "
            f"it removed"
        )
    if info.st_mode & _OTHERS_WRITE:
        writers = {stat.S_IWGRP: "its group", stat.S_IWOTH: "every user"}
        who = writers.get(info.st_mode & _OTHERS_WRITE, "group and others")
        raise UnsafeLocation(
            f"{path} can be written by {who} (mode {stat.S_IMODE(info.st_mode):04o}; a sticky bit does not stop "
            f"others creating files there): make it yours alone with chmod 700 {path}, or point {CACHE_ENV} at a "
            f"directory of your own"
        )
    return path


def open_private(path: Path, flags: int) -> int:
    """A regular file of this user's, not a symlink target, mode 0600, never blocking (FIFO) (else UnsafeLocation)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafeLocation(f"{path} is a symbolic link; remove it (rm {path}): the launcher creates it") from None
        raise UnsafeLocation(f"cannot open {path} ({error.strerror or error})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeLocation(f"{path} is not a regular file; remove it (rm {path}): the launcher creates it")
        if info.st_uid != os.geteuid():
            raise UnsafeLocation(f"{path} belongs to {owner_name(info.st_uid)}, not to you; remove it (rm {path})")
        if info.st_mode & _OTHERS_ANY:
            os.fchmod(fd, PRIVATE_FILE_MODE)  # e.g. a lock made 0644 by an older serve.sh: others could flock it
    except BaseException:
        os.close(fd)
        raise
    return fd
