"""The one guarded reader for every file a user names: a regular file only (a FIFO would block, a device never end),
a size cap checked before the bytes are held, UTF-8, and for JSON a nesting cap checked before the parser recurses.
Every refusal is an ``UnreadableFile`` (``UserError``, exit 2). Standard library only: the benchmark uses it too."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from kimi_dflash.core.errors import UserError

MiB = 1024 * 1024
DEFAULT_MAX_BYTES = 64 * MiB
LOG_TAIL = 16 * MiB  # of a server log: its latest start's lines
MAX_JSON_DEPTH = 64


class UnreadableFile(UserError):
    """A user-named file that cannot be read as asked: the message says which, why, and what to do."""


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for messages ("a directory", "a FIFO (named pipe)" ...)."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))
    kinds += ((stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // 1024} KiB" if n >= 1024 else f"{n} bytes"


def read_user_bytes(
    path: Path | str,
    *,
    what: str = "file",
    max_bytes: int = DEFAULT_MAX_BYTES,
    follow_symlinks: bool = True,
    tail: bool = False,
) -> bytes:
    """``what`` names the file's role in messages ("dataset"). ``follow_symlinks=False`` refuses a symlink (for
    records in directories other users may reach). ``tail``: a bigger file is not refused, its last ``max_bytes``
    are read (a server log: its latest start)."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)  # a FIFO must not block the open
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise UnreadableFile(f"{what} {path}: no such file; check the path") from None
    except IsADirectoryError:
        raise UnreadableFile(f"{what} {path}: is a directory; name a file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            reason = "is a symbolic link, which is refused here" if not follow_symlinks else "is a symlink loop"
            raise UnreadableFile(f"{what} {path}: {reason}; name the file itself") from None
        raise UnreadableFile(
            f"{what} {path}: cannot be opened ({exc.strerror or exc}); check its permissions"
        ) from None
    info = os.fstat(fd)
    refusal = None
    if not stat.S_ISREG(info.st_mode):
        refusal = f"{what} {path}: is {file_kind(info.st_mode)}; name a regular file"
    elif info.st_size > max_bytes and not tail:
        refusal = (
            f"{what} {path}: is {_size(info.st_size)}, over the {_size(max_bytes)} this reader takes; "
            "name a smaller file"
        )
    if refusal:
        os.close(fd)
        raise UnreadableFile(refusal)
    with os.fdopen(fd, "rb") as handle:
        try:
            handle.seek(max(0, info.st_size - max_bytes) if tail else 0)
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise UnreadableFile(f"{what} {path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > max_bytes and not tail:  # grew while being read
        raise UnreadableFile(f"{what} {path}: is over the {_size(max_bytes)} this reader takes; name a smaller file")
    return data[:max_bytes]


def read_user_text(
    path: Path | str, *, what: str = "file", max_bytes: int = DEFAULT_MAX_BYTES, follow_symlinks: bool = True
) -> str:
    """The file's text, which must be UTF-8 (a byte-order mark is dropped)."""
    data = read_user_bytes(path, what=what, max_bytes=max_bytes, follow_symlinks=follow_symlinks)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            f"{what} {path}: is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); save it as UTF-8"
        ) from None


def read_log_tail(path: Path | None, *, what: str = "server log", max_bytes: int = LOG_TAIL) -> str:
    """A log's last ``max_bytes`` as text ("" for no path; undecodable bytes replaced): the guarded reader's, so a FIFO
    is refused, not waited on, and /dev/zero read no further than the cap."""
    data = b"" if path is None else read_user_bytes(path, what=what, max_bytes=max_bytes, tail=True)
    return data.decode("utf-8", errors="replace")


def json_depth_problem(text: str, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why ``text`` nests deeper than ``max_depth`` arrays/objects (None when it does not). A scan outside string
    literals, so json.loads never recurses past the interpreter's limit on hostile input."""
    if text.count("[") + text.count("{") <= max_depth:  # cannot nest deeper (C-speed; e.g. every JSONL line)
        return None
    depth = 0
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                return f"nests deeper than {max_depth} levels (at character {index})"
        elif char in "]}":
            depth -= 1
    return None


def parse_user_json(text: str, *, where: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON from a user's text (a file's, or an option's value), with the nesting cap; ``where`` names it."""
    if problem := json_depth_problem(text, max_depth):
        raise UnreadableFile(f"{where}: {problem}; flatten it")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableFile(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # out-of-range numbers and the like
        raise UnreadableFile(f"{where}: not valid JSON ({exc})") from None


def read_user_json(
    path: Path | str,
    *,
    what: str = "JSON file",
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    follow_symlinks: bool = True,
) -> Any:
    text = read_user_text(path, what=what, max_bytes=max_bytes, follow_symlinks=follow_symlinks)
    return parse_user_json(text, where=f"{what} {path}", max_depth=max_depth)
