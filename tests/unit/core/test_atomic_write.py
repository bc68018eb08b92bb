"""core/atomic_write.py, the project's one atomic-write helper: readers see the old file or the new one."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kimi_dflash.core.atomic_write import (
    publish_directory,
    replacing,
    write_beside,
    write_json_atomic,
    write_text_atomic,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_is_readable_by_all_and_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    fresh = tmp_path / "sub" / "fresh.txt"
    write_text_atomic(fresh, "one\n")
    assert fresh.read_text() == "one\n" and _mode(fresh) == 0o644
    fresh.chmod(0o600)
    write_json_atomic(fresh, {"b": 1, "a": 2})
    assert fresh.read_text() == '{\n  "b": 1,\n  "a": 2\n}\n' and _mode(fresh) == 0o600
    assert [p.name for p in fresh.parent.iterdir()] == ["fresh.txt"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "plot.png"
    target.write_text("old")
    with pytest.raises(RuntimeError), replacing(target, suffix=".png") as temporary:
        temporary.write_text("half")
        raise RuntimeError("savefig failed")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["plot.png"]
    with replacing(target, suffix=".png") as temporary:
        temporary.write_text("new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_write_beside_returns_an_unrenamed_temporary_with_the_targets_mode(tmp_path: Path) -> None:
    target = tmp_path / "module.py"
    target.write_text("old")
    target.chmod(0o664)
    temporary = write_beside(target, b"new", suffix=".kimi-tmp")
    assert temporary.parent == tmp_path and temporary.name.endswith(".kimi-tmp")
    assert temporary.read_bytes() == b"new" and _mode(temporary) == 0o664 and target.read_text() == "old"


def test_publish_directory_swaps_a_whole_tree(tmp_path: Path) -> None:
    live = tmp_path / "bundle"
    live.mkdir()
    (live / "old.txt").write_text("old")
    staging = tmp_path / ".building"
    staging.mkdir(mode=0o700)
    (staging / "new.txt").write_text("new")
    publish_directory(staging, live)
    assert [p.name for p in live.iterdir()] == ["new.txt"] and _mode(live) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_a_symlink_is_replaced_never_followed_nor_copied_from(tmp_path: Path) -> None:
    victim = tmp_path / "elsewhere" / "secret"
    victim.parent.mkdir()
    victim.write_text("keep\n")
    victim.chmod(0o600)
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    write_text_atomic(link, "new\n")
    assert not link.is_symlink() and link.read_text() == "new\n"
    assert victim.read_text() == "keep\n"
    assert _mode(link) == 0o644  # a new file's mode, not the link target's
