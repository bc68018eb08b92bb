"""validate and validate-fp8 against outputs and logs that cannot be used (issue 31 S2, D6, D7): a --json that is a
device, a directory or in a directory nobody can create files in, and a server log that is a FIFO or a device, are
refused in one line before any server is asked; a write that fails at the end is one line too."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from kimi_dflash.core import options
from kimi_dflash.core.user_files import LOG_TAIL, UnreadableFile, read_log_tail
from kimi_dflash.fp8 import validate as validate_fp8
from kimi_dflash.fp8.validate import kv_capacity_from_log
from kimi_dflash.validate import cli as validate_cli
from kimi_dflash.validate import engine

UNREACHABLE = "http://127.0.0.1:9"  # nothing listens: a check that comes first says its own problem


def _validate(*extra: str) -> int:
    return options.run(validate_cli, ["--reference", UNREACHABLE, "--candidate", UNREACHABLE, *extra])


def _validate_fp8(*extra: str) -> int:
    return options.run(validate_fp8, ["--bf16-url", UNREACHABLE, "--fp8-url", UNREACHABLE, *extra])


def _targets(tmp_path: Path) -> list[tuple[Path, str]]:
    """(a --json that cannot be written, what the refusal says): what root is refused too."""
    device = tmp_path / "full"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # a copy of /dev/full, never the machine's
    blocker = tmp_path / "file"
    blocker.write_text("x")
    return [
        (device, f"--json {device} is a device; it would be replaced by a regular file"),
        (tmp_path, f"--json {tmp_path} is a directory"),
        (blocker / "out.json", f"--json {blocker / 'out.json'}: cannot write in {blocker}"),
        (Path("/proc/out.json"), "--json /proc/out.json: cannot write in /proc"),
    ]


@pytest.mark.parametrize("verb", [_validate, _validate_fp8], ids=["validate", "validate-fp8"])
def test_a_json_output_that_cannot_be_written_is_refused_before_any_server_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb
) -> None:  # type: ignore[no-untyped-def]
    for target, says in _targets(tmp_path):
        assert verb("--json", str(target)) == 3
        err = capsys.readouterr().err
        assert says in err and "cannot reach" not in err and err.count("\n") == 1, err
    assert stat.S_ISCHR((tmp_path / "full").lstat().st_mode)


def test_a_json_write_that_fails_at_the_end_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the generation (servers stood in): the disk refuses (EROFS: root is refused too)."""
    server = engine.Server(UNREACHABLE, "m")
    monkeypatch.setattr(engine, "served", lambda urls, models, key, timeout_s: (server, server))

    async def collected(*args: object) -> engine.Comparison:
        return engine.Comparison(server, server, [], None, None)

    def read_only(path: Path, document: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(engine, "collect", collected)
    monkeypatch.setattr(validate_cli, "write_json_atomic", read_only)
    assert _validate("--json", str(tmp_path / "out.json")) == 3
    err = capsys.readouterr().err
    assert f"error: cannot write --json {tmp_path / 'out.json'}: {os.strerror(errno.EROFS)}" in err
    assert "Traceback" not in err


def test_a_server_log_that_is_a_fifo_or_a_device_is_refused_before_generating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO as --bf16-log hung after the whole generation; /dev/zero ended in MemoryError."""
    fifo, zero = tmp_path / "bf16.log", tmp_path / "zero"
    os.mkfifo(fifo)
    os.mknod(zero, 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # a copy of /dev/zero
    for log, kind in ((fifo, "a FIFO (named pipe)"), (zero, "a device")):
        assert _validate_fp8("--bf16-log", str(log)) == 3
        err = capsys.readouterr().err
        assert f"server log {log}: is {kind}; name a regular file" in err and "cannot reach" not in err


def test_a_big_log_is_read_from_its_tail_the_latest_start(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("wb") as handle:
        handle.write(b"GPU KV cache size: 1,000 tokens\n")  # an earlier start, beyond the tail
        handle.truncate(LOG_TAIL + 4096)  # sparse: no need to write it
        handle.seek(0, os.SEEK_END)
        handle.write(b"INFO GPU KV cache size: 2,048 tokens\n")
    assert kv_capacity_from_log(read_log_tail(log)) == 2048
    assert read_log_tail(None) == ""
    with pytest.raises(UnreadableFile, match="no such file"):
        read_log_tail(tmp_path / "missing.log")
