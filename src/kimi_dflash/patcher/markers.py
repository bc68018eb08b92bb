"""The marker line a patched file carries: which patch, and the sha256 of the file before it.

It is a Python comment appended at the end of the file, so the module stays valid, and `revert`
can prove it restored the original byte for byte.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_PREFIX = "# kimi-dflash-patch:"
_MARKER_RE = re.compile(
    r"^# kimi-dflash-patch: id=(?P<id>[a-z0-9-]+) sha256-before=(?P<sha>[0-9a-f]{64})"
    r"(?P<newline> newline-added)?$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Marker:
    patch_id: str
    sha256_before: str
    newline_added: bool  # the original did not end with a newline; we added one before the marker


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def find_markers(text: str) -> list[Marker]:
    return [Marker(m["id"], m["sha"], m["newline"] is not None) for m in _MARKER_RE.finditer(text)]


def has_marker(text: str, patch_id: str) -> bool:
    return any(marker.patch_id == patch_id for marker in find_markers(text))


def add_marker(text_before: str, patched: str, patch_id: str) -> str:
    """`patched` plus a marker recording `text_before`'s hash (the file before this patch)."""
    newline_added = not patched.endswith("\n")
    line = f"{_PREFIX} id={patch_id} sha256-before={sha256_text(text_before)}"
    if newline_added:
        line += " newline-added"
    return patched + ("\n" if newline_added else "") + line + "\n"


def remove_marker(text: str, patch_id: str) -> tuple[str, Marker]:
    """Drop this patch's marker line; return the text and the marker. KeyError if absent."""
    for match in _MARKER_RE.finditer(text):
        if match["id"] != patch_id:
            continue
        marker = Marker(match["id"], match["sha"], match["newline"] is not None)
        end = match.end() + (1 if text[match.end() : match.end() + 1] == "\n" else 0)
        start = match.start()
        if marker.newline_added and start > 0 and text[start - 1] == "\n":
            start -= 1
        return text[:start] + text[end:], marker
    raise KeyError(patch_id)
