"""Test doubles of a vLLM release: the installed source with one file's text edited (older or newer shapes), and a
writable copy of a vllm tree for the patcher."""

from __future__ import annotations

import shutil
from pathlib import Path

from kimi_dflash.rules.rope_amplitude import FACTORY_FILE
from kimi_dflash.rules.source import VllmSource


def edited_source(source: VllmSource, tmp_path: Path, relpath: str, old: str, new: str) -> VllmSource:
    """`source` with `old` replaced by `new` in `relpath` (the edited copy lives in tmp_path; the rest stays real)."""
    text = source.text(relpath) or ""
    assert old in text, f"{relpath} no longer holds {old!r}: update the test's edit"
    path = tmp_path / relpath.replace("/", "__")
    path.write_text(text.replace(old, new))
    files = {**source._files, relpath: path}  # noqa: SLF001 - a test double of one file
    return VllmSource(source.origin, files, lambda handle: Path(str(handle)).read_text(encoding="utf-8"))


def rope_factory_before_0_30(source: VllmSource, tmp_path: Path) -> VllmSource:
    """`source` with get_rope passing on none of mscale, mscale_all_dim, attention_factor: vLLM's shape up to 0.29."""
    keys = '"mscale",\n                "mscale_all_dim",\n                "attention_factor",\n'
    return edited_source(source, tmp_path, FACTORY_FILE, keys, "")


def writable_copy(source_root: Path, destination: Path) -> Path:
    """Copy an extracted (or installed) vllm tree, only the files the patch registry reads (and the two that make it
    a vllm package with a version), so a test can patch it without touching the cache or site-packages."""
    from kimi_dflash.patcher.registry import source_paths

    target = destination / "vllm"
    for member in ("__init__.py", "_version.py", *source_paths()):
        src = source_root / member
        if src.is_file():
            (target / member).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target / member)
    (target / "v1").mkdir(parents=True, exist_ok=True)
    return target
