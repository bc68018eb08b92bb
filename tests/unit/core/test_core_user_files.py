"""The one guarded reader for user-named files: regular files only, a size cap, UTF-8, a JSON nesting cap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kimi_dflash.core.user_files import (
    UnreadableFile,
    json_depth_problem,
    parse_user_json,
    read_user_bytes,
    read_user_json,
    read_user_text,
)


def test_a_regular_file_reads(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"a": [1, "]]]]"]}', encoding="utf-8")
    assert read_user_json(path) == {"a": [1, "]]]]"]}


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "missing"])
def test_non_regular_files_are_named_not_missing(tmp_path: Path, kind: str) -> None:
    path = {"device": Path("/dev/zero"), "directory": tmp_path}.get(kind, tmp_path / "x")
    if kind == "fifo":
        os.mkfifo(path)  # nobody writes: a plain open would block
    with pytest.raises(UnreadableFile) as caught:
        read_user_bytes(path, what="dataset")
    expected = {"fifo": "is a FIFO", "device": "is a device", "directory": "is a directory", "missing": "no such file"}
    assert expected[kind] in str(caught.value) and str(caught.value).startswith("dataset ")
    assert caught.value.exit_code == 2


def test_size_cap_is_checked_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 2048)
    with pytest.raises(UnreadableFile, match="over the 1 KiB"):
        read_user_bytes(path, max_bytes=1024)
    assert read_user_bytes(path, max_bytes=2048) == b"x" * 2048


def test_non_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"caf\xe9")
    with pytest.raises(UnreadableFile, match="not UTF-8 text .*0xe9"):
        read_user_text(path)


def test_deep_nesting_is_refused_before_the_parser_recurses() -> None:
    hostile = "[" * 100_000 + "]" * 100_000
    with pytest.raises(UnreadableFile, match="nests deeper than 64"):
        parse_user_json(hostile, where="--extra-body")
    assert json_depth_problem('{"k": "[[[[[[[["}', max_depth=1) is None  # brackets inside strings do not count
    assert json_depth_problem("[[1]]", max_depth=1) is not None


def test_invalid_json_names_the_place() -> None:
    with pytest.raises(
        UnreadableFile,
        match=r"--extra-body: not valid JSON \(Expecting property name enclosed in double quotes at line 1",
    ):
        parse_user_json("{", where="--extra-body")


def test_symlinks_can_be_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("1")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_user_text(link) == "1"
    with pytest.raises(UnreadableFile, match="symbolic link"):
        read_user_text(link, follow_symlinks=False)
