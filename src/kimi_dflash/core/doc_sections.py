"""Generated sections of README.md and docs/: the text between a begin and an end marker line, replaced whole. Every
doc generator (README's results here, the lab's) writes through this module, given the file's path.
"""

from __future__ import annotations

from pathlib import Path

from kimi_dflash.core.atomic_write import write_text_atomic


class MissingMarkers(ValueError):
    """The file lacks a marker pair; the message names the file and both markers."""


def splice(text: str, body: str, begin: str, end: str) -> str:
    """``text`` with everything between ``begin`` and ``end`` replaced by ``body`` (markers kept)."""
    if begin not in text or end not in text:
        raise MissingMarkers(f"markers {begin!r} / {end!r} not found")
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}{end}{tail}"


def update_sections(path: Path, sections: list[tuple[str, str, str]]) -> Path:
    """Replace each (body, begin, end) section of the file at ``path`` in one atomic write; returns the path."""
    text = path.read_text(encoding="utf-8")
    for body, begin, end in sections:
        try:
            text = splice(text, body, begin, end)
        except MissingMarkers as error:
            raise MissingMarkers(f"{path}: {error}") from None
    write_text_atomic(path, text)
    return path
