"""Generated sections of README.md and docs/: the text between a begin and an end marker line, replaced whole. Every
doc generator (README's results here, the lab's) writes through this module, given the file's path."""

from __future__ import annotations

from pathlib import Path

from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.user_files import read_user_text


class MissingMarkers(ValueError):
    """The file lacks a marker pair; the message names the file and both markers."""


def splice(text: str, body: str, begin: str, end: str) -> str:
    """``text`` with everything between ``begin`` and ``end`` replaced by ``body`` (markers kept): exactly one
    ``begin``, then one ``end`` (anything else would cut the wrong part of the file)."""
    counts = (text.count(begin), text.count(end))
    if counts != (1, 1) or text.index(end) < text.index(begin):
        found = "end before begin" if counts == (1, 1) else f"{counts[0]} begin and {counts[1]} end"
        raise MissingMarkers(
            f"markers {begin!r} then {end!r}: need one of each, in that order (found {found}); nothing written"
        )
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}{end}{tail}"


def update_sections(path: Path, sections: list[tuple[str, str, str]]) -> Path:
    """Replace each (body, begin, end) section of the file at ``path`` in one atomic write; returns the path. A
    symlink is refused (the project never writes through one: name the file it points to)."""
    text = read_user_text(path, what="file to update", follow_symlinks=False)
    for body, begin, end in sections:
        try:
            text = splice(text, body, begin, end)
        except MissingMarkers as error:
            raise MissingMarkers(f"{path}: {error}") from None
    write_text_atomic(path, text)
    return path
