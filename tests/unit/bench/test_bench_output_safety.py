"""The benchmark never loses an earlier result: a rerun that fails before its first level keeps the old file; a
full disk keeps the last complete level with a status that says so; special files are refused or left alone; an
unwritable --output is refused before anything is measured."""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench_helpers import bench_in_process
from kimi_dflash.bench import cli as bench_cli
from kimi_dflash.bench import output_file
from kimi_dflash.bench.result import load_result
from kimi_dflash.core import options
from synthetic_server import running

FAST = ["--ttft-ms", "5", "--chunk-interval-ms", "1"]
SMALL = ["--turns-per-session", "1", "--max-tokens", "4"]


def _bench(url: str, out: Path | str, *extra: str) -> object:
    return bench_in_process("--base-url", url, "--output", str(out), *SMALL, *extra)


@pytest.fixture(scope="module")
def fast_url() -> Iterator[str]:
    """One plain synthetic server for the tests that never read its counters."""
    with running(FAST) as url:
        yield url


def test_a_rerun_that_fails_before_measuring_keeps_the_earlier_result(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    with running(FAST) as url:
        first = _bench(url, out, "--sessions", "2", "--warmup", "0")
    assert first.returncode == 0, first.stderr
    before = out.read_bytes()
    with running([*FAST, "--faults", "http_500"]) as url:  # every request fails: the warm-up fails
        failed = _bench(url, out, "--sessions", "2", "--warmup", "1")
    assert failed.returncode != 0
    assert out.read_bytes() == before  # untouched
    partial = out.with_name("result.json.partial")
    assert load_result(partial).run.status == "failed"
    assert "earlier result in" in failed.stderr and str(partial) in failed.stderr
    assert "Traceback" not in failed.stderr


def test_a_rerun_that_measures_moves_the_earlier_result_aside(tmp_path: Path, fast_url: str) -> None:
    out = tmp_path / "result.json"
    assert _bench(fast_url, out, "--sessions", "1", "--warmup", "0", "--label", "old").returncode == 0
    second = _bench(fast_url, out, "--sessions", "1", "--warmup", "0", "--label", "new")
    assert second.returncode == 0, second.stderr
    assert load_result(out).run.label == "new"
    assert load_result(tmp_path / "result.previous.json").run.label == "old"
    assert not (tmp_path / "result.json.partial").exists()


def test_disk_full_keeps_the_last_complete_level_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = output_file.write_text_atomic

    def full_at_second_level(path: Path, text: str, **kwargs: object) -> None:
        if len(json.loads(text)["results"]) >= 2:  # the disk fills while level 2 is being saved
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, text, **kwargs)

    monkeypatch.setattr(output_file, "write_text_atomic", full_at_second_level)
    out = tmp_path / "full.json"
    with running(FAST) as url:
        code = options.run(
            bench_cli, ["--base-url", url, "--output", str(out), *SMALL, "--sessions", "1,2", "--warmup", "0"]
        )
    err = capsys.readouterr().err
    assert code == output_file.EXIT_WRITE_FAILED
    result = load_result(out)
    assert [level.sessions for level in result.results] == [1]  # the last complete level is in the file
    assert result.run.status == "failed" and "no space left" in (result.run.status_detail or "")
    assert err.count("error:") == 1 and "Traceback" not in err
    assert "1 level(s) measured since are only in the output above" in err


def test_dev_null_is_never_replaced(fast_url: str) -> None:
    proc = _bench(fast_url, os.devnull, "--sessions", "1", "--warmup", "0")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert "result written to" not in proc.stderr


def test_fifo_and_directory_outputs_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target, kind in ((fifo, "a FIFO"), (tmp_path, "a directory")):
        proc = _bench("http://127.0.0.1:9", target, "--sessions", "1")
        assert proc.returncode == 2 and kind in proc.stderr and "Traceback" not in proc.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_unwritable_output_is_refused_before_measuring(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    # a file where a directory must be; a directory nobody can create files in (even root)
    for target in (blocker / "result.json", Path("/proc/result.json")):
        proc = _bench("http://127.0.0.1:9", target, "--sessions", "1")
        assert proc.returncode == 2, proc.stderr
        assert f"--output {target}" in proc.stderr and "cannot" in proc.stderr
        assert "results so far" not in proc.stderr and "Traceback" not in proc.stderr


def _plant(directory: Path, name: str, victim: Path) -> Path:
    """Another user's symlink at ``name`` in a shared sticky directory (as root: owned by nobody), to ``victim``."""
    link = directory / name
    link.symlink_to(victim)
    if os.geteuid() == 0:
        directory.chmod(0o1777)  # like /tmp
        os.lchown(link, 65534, 65534)
    return link


@pytest.mark.parametrize("name", ["result.json", "result.json.partial", "result.previous.json", "result.levels.csv"])
def test_a_symlink_at_any_output_path_is_refused_and_its_target_untouched(
    tmp_path: Path, name: str, fast_url: str
) -> None:
    shared, elsewhere = tmp_path / "shared", tmp_path / "elsewhere"
    shared.mkdir()
    elsewhere.mkdir()
    victim = elsewhere / "owned-by-root.conf"
    victim.write_text("precious\n")
    before = victim.stat()
    link = _plant(shared, name, victim)
    proc = _bench(fast_url, shared / "result.json", "--sessions", "1", "--warmup", "0", "--csv")
    assert proc.returncode == 2, proc.stderr
    assert f"{link} is a symbolic link (to {victim})" in proc.stderr and "Traceback" not in proc.stderr
    assert victim.read_text() == "precious\n" and victim.stat().st_mtime_ns == before.st_mtime_ns
    assert link.is_symlink() and sorted(p.name for p in shared.iterdir()) == [name]  # nothing else written


def test_a_link_planted_at_the_backup_during_the_run_is_replaced_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "result.json"
    victim = tmp_path / "victim.conf"
    victim.write_text("precious\n")
    with running(FAST) as url:
        assert _bench(url, out, "--sessions", "1", "--warmup", "0", "--label", "old").returncode == 0
        out.chmod(0o600)  # a private result stays private in its copy

        def link_raced(source: Path, name: Path) -> None:  # the link appears between unlink and link
            Path(name).symlink_to(victim)
            raise FileExistsError(17, "File exists")

        monkeypatch.setattr(output_file.os, "link", link_raced)
        code = options.run(
            bench_cli, ["--base-url", url, "--output", str(out), *SMALL, "--sessions", "1", "--warmup", "0"]
        )
    assert code == 0
    backup = tmp_path / "result.previous.json"
    assert victim.read_text() == "precious\n"
    assert not backup.is_symlink() and load_result(backup).run.label == "old"
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root")
def test_an_output_under_another_users_symlinked_directory_is_refused_before_measuring(tmp_path: Path) -> None:
    """Issue 31 S6: only the last component was checked; a directory link planted by another user in a sticky
    directory steered root's result (and its .partial, .previous) into a root-only directory."""
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    (tmp_path / "shared").mkdir()
    link = _plant(tmp_path / "shared", "results", private)
    proc = _bench("http://127.0.0.1:9", link / "result.json", "--sessions", "1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--output {link / 'result.json'}: goes through {link}, a symbolic link owned by nobody" in proc.stderr
    assert list(private.iterdir()) == []
