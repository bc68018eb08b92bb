"""Atomic file writes, the project's one implementation: a temporary file beside the target, flushed, renamed over it.
A new file gets mode 0644 (mkstemp's 0600 would hide a shared cache from other users); a replaced file keeps its
mode. What it refuses: docs/security.md, "Files the tools write". Standard library only: the benchmark uses it too."""

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

from kimi_dflash.core.errors import UserError
from kimi_dflash.core.user_files import file_kind

NEW_FILE_MODE = 0o644
MAX_LINKS = 40  # what Linux follows before ELOOP


class RefusedTarget(UserError):
    """A write that would replace what is not a regular file, or land where another user's symbolic link says."""


def owner_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def foreign_link(path: Path) -> Path | None:
    """The first symbolic link on the way to ``path`` (links in links' targets too) owned by neither this user nor
    root: its owner decides where a write lands. None up to the first missing component (the writer makes the rest)."""
    current, pending = Path("/"), list(Path(path).absolute().parts[1:])
    for _ in range(MAX_LINKS):
        while pending and not (current / pending[0]).is_symlink():
            current = current.parent if pending[0] == ".." else current / pending[0]
            pending.pop(0)
            if not os.path.lexists(current):
                return None
        if not pending:
            return None
        link = current / pending.pop(0)
        if link.lstat().st_uid not in (0, os.geteuid()):
            return link
        target = Path(os.readlink(link))
        current, pending = (Path("/") if target.is_absolute() else current), [*target.parts, *pending]
        pending = [part for part in pending if part != "/"]
    return None


def refuse_foreign_link(path: Path, what: str = "") -> None:
    """``RefusedTarget`` naming ``foreign_link`` (``what``: the option, "--json ")."""
    if (link := foreign_link(path)) is not None:
        raise RefusedTarget(
            f"{what}{path}: goes through {link}, a symbolic link owned by {owner_name(link.lstat().st_uid)} (to "
            f"{os.readlink(link)}): its owner decides where this write lands. Name a path without it."
        )


def refuse_target(path: Path, what: str = "") -> None:
    """``refuse_foreign_link``, and a target that is not a regular file (renaming over /dev/null would replace the
    machine's). A symlink at ``path`` itself is replaced, not followed."""
    refuse_foreign_link(path, what)
    try:
        mode = path.lstat().st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise RefusedTarget(
            f"{what}{path} is {file_kind(mode)}; it would be replaced by a regular file. Give a file path."
        )


def check_target(path: Path, what: str = "") -> None:
    """``refuse_target``, and a directory where no file can be created: for verbs to say so before their work."""
    refuse_target(path, what)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=True):
            pass
    except OSError as error:
        problem = f"cannot write in {path.parent} ({error.strerror or error})"
        raise RefusedTarget(f"{what}{path}: {problem}; choose a directory you can write to") from None


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
    refuse_target(path)
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
    refuse_target(path)
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
        os.close(fd)
        temporary = Path(name)
        yield temporary
        _fsync(temporary)
        os.chmod(temporary, _mode_for(path, mode))
        os.replace(temporary, path)
    except OSError as error:  # named for the target the caller gave, not the temporary
        raise OSError(error.errno, error.strerror, str(path)) from None
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)


def write_bytes_atomic(path: Path | str, data: bytes, *, mode: int | None = None) -> None:
    with replacing(path, mode=mode) as temporary:
        temporary.write_bytes(data)


def write_text_atomic(path: Path | str, text: str, *, mode: int | None = None) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode)


def write_json_atomic(path: Path | str, document: Any, *, indent: int = 2, mode: int | None = None) -> None:
    """JSON with a trailing newline, keys in the document's order."""
    write_text_atomic(path, json.dumps(document, indent=indent) + "\n", mode=mode)


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
