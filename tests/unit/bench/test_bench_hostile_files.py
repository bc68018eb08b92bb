"""Every file the benchmark, compare and advise read on a user's word goes through the guarded reader: a FIFO,
/dev/zero, a directory, deeply nested JSON or non-UTF-8 bytes give exit 2 and one line naming the file, never a
hang, a MemoryError or a traceback."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bench_helpers import EXAMPLE_RESULT
from kimi_dflash.advisor import cli as advise_cli
from kimi_dflash.bench import cli as bench_cli
from kimi_dflash.bench import compare
from kimi_dflash.core import options

UNREACHABLE = "http://127.0.0.1:9"  # the inputs are read before any connection is made
DEEP = "[" * 100_000 + "]" * 100_000
# What the message says each kind of file is: a directory is not "no such file".
NAMED = {"fifo": "FIFO", "device": "a device", "directory": "a directory", "nested": "nests deeper", "latin1": "UTF-8"}


def _hostile(kind: str, tmp_path: Path) -> Path:
    """A file of the given hostile ``kind``."""
    if kind == "device":
        return Path("/dev/zero")
    if kind == "directory":
        directory = tmp_path / "a-directory.json"
        directory.mkdir()
        return directory
    path = tmp_path / f"{kind}.json"
    if kind == "fifo":
        os.mkfifo(path)  # nobody writes: a plain open would block forever
    elif kind == "nested":
        path.write_text(DEEP + "\n", encoding="utf-8")
    elif kind == "latin1":
        path.write_bytes('{"prompt": "café"}\n'.encode("latin-1"))
    return path


def _bench(args: list[str], tmp_path: Path) -> int:
    return options.run(
        bench_cli, ["--base-url", UNREACHABLE, "--output", str(tmp_path / "out.json"), "--sessions", "1", *args]
    )


READERS: dict[str, Callable[[Path, Path], int]] = {
    "--extra-body @FILE": lambda path, tmp: _bench(["--extra-body", f"@{path}"], tmp),
    "--dataset": lambda path, tmp: _bench(["--dataset", str(path)], tmp),
    "compare input": lambda path, tmp: options.run(compare, [str(path), str(EXAMPLE_RESULT)]),
    "advise input": lambda path, tmp: options.run(advise_cli, [str(path)]),
}


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "nested", "latin1"])
@pytest.mark.parametrize("reader", list(READERS))
def test_hostile_input_files_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: str, kind: str
) -> None:
    path = _hostile(kind, tmp_path)
    code = READERS[reader](path, tmp_path)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, err
    # advise reads a directory as a sweep directory (its own test below)
    named = "no finished sweep point results" if (reader, kind) == ("advise input", "directory") else NAMED[kind]
    assert str(path) in err and named in err and "\n" not in err, err
    assert "Traceback" not in captured.err + captured.out
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "out.json.partial").exists()


def test_advise_skips_hostile_files_in_a_sweep_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "point-fifo.json")  # would block a plain open
    (tmp_path / "point-nested.json").write_text(DEEP, encoding="utf-8")
    assert options.run(advise_cli, [str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no finished sweep point results" in err and "Traceback" not in err


def test_inline_extra_body_nesting_is_capped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _bench(["--extra-body", '{"a": ' * 50_000 + "1" + "}" * 50_000], tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert "--extra-body" in err and "nests deeper" in err and "\n" not in err


def test_a_large_jsonl_dataset_is_still_read(tmp_path: Path) -> None:
    """The guard costs no capacity: a dataset over the default 64 MiB cap of the reader still loads."""
    from kimi_dflash.bench.workload import load_dataset

    path = tmp_path / "big.jsonl"
    line = '{"prompt": "' + "word " * 2000 + '"}\n'
    with path.open("w", encoding="utf-8") as handle:
        for _ in range(70 * 1024 * 1024 // len(line) + 1):
            handle.write(line)
    assert len(load_dataset(str(path)).prompts) > 6000
