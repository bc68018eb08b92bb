"""core/atomic_write.py, the project's one atomic-write helper: readers see the old file or the new one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kimi_dflash.core.atomic_write import (
    RefusedTarget,
    check_target,
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


def _device_copy(path: Path, major_minor: tuple[int, int] = (1, 3)) -> Path:
    """A character device like /dev/null (1, 3) in a scratch directory: never the machine's own."""
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(*major_minor))
    return path


@pytest.mark.parametrize("kind", ["device", "FIFO", "directory"])
def test_a_target_that_is_not_a_regular_file_is_refused_and_left_as_it_is(tmp_path: Path, kind: str) -> None:
    """Issue 31 S2: validate --json /dev/full as root renamed a regular file over the machine's /dev/full."""
    target = tmp_path / "null"
    if kind == "device":
        _device_copy(target)
    elif kind == "FIFO":
        os.mkfifo(target)
    else:
        target.mkdir()
    before = target.lstat()
    with pytest.raises(RefusedTarget, match=f"{target} is a {kind}.*; it would be replaced by a regular file"):
        write_text_atomic(target, "x")
    with pytest.raises(RefusedTarget, match="would be replaced"):
        write_beside(target, b"x")
    after = target.lstat()
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
    assert [p.name for p in tmp_path.iterdir()] == ["null"]  # no temporary left


def _plant_in_sticky(shared: Path, name: str, target: Path) -> Path:
    """Another user's symlink (nobody's) in a sticky, world-writable directory like /tmp (the tests run as root)."""
    shared.mkdir(mode=0o777, exist_ok=True)
    shared.chmod(0o1777)
    link = shared / name
    link.symlink_to(target)
    os.lchown(link, 65534, 65534)
    return link


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root")
def test_a_path_through_another_users_symlinked_directory_is_refused(tmp_path: Path) -> None:
    """Issue 31 S6: only the last component was checked, so another user's directory symlink in a sticky
    directory steered root's writes into a root-only directory."""
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    link = _plant_in_sticky(tmp_path / "shared", "results", private)
    for target in (link / "result.json", tmp_path / "shared" / "." / "results" / "deeper" / "x.json"):
        with pytest.raises(RefusedTarget, match=f"goes through {link}, a symbolic link owned by nobody"):
            write_text_atomic(target, "x")
        with pytest.raises(RefusedTarget, match="owned by nobody"):
            check_target(target, "--json ")
    # a link to that link (ours) is followed to it, and refused there too
    ours = tmp_path / "ours"
    ours.symlink_to(link)
    with pytest.raises(RefusedTarget, match="owned by nobody"):
        write_text_atomic(ours / "result.json", "x")
    assert list(private.iterdir()) == []
    # this user's (and root's) own links are followed as before
    os.lchown(link, 0, 0)
    write_text_atomic(ours / "result.json", "x")
    assert (private / "result.json").read_text() == "x"


def test_check_target_says_before_the_work_that_a_directory_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for target in (blocker / "out.json", Path("/proc/out.json")):  # what root too is refused
        with pytest.raises(RefusedTarget, match=f"--json {target}: cannot write in {target.parent} "):
            check_target(target, "--json ")


def test_a_write_that_fails_names_the_target_not_its_temporary(tmp_path: Path) -> None:
    with pytest.raises(OSError) as error:
        write_text_atomic(Path("/proc/out.json"), "x")
    assert error.value.filename == "/proc/out.json"
