"""qualify against hostile or unlucky surroundings (issue 25): an --out that is a symlink, a file or someone's
non-empty directory; a second run on a directory in use; a serve.sh --stop that fails; a read-only or full disk;
a damaged state file; an interrupt. Steps are faked (qualify_fakes) except where a server matters, and then
serve.sh is the stand-in (serve_stand_in): no vLLM."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from extras import needs_cpu_extra
from kimi_dflash.core import options
from kimi_dflash.qualify import cli as qualify_cli
from kimi_dflash.qualify import steps
from kimi_dflash.qualify.state import QualifyState
from kimi_dflash.runs.orchestrator import Interrupted
from qualify_fakes import PASSING_VERDICT, fake_output, fakes
from repo_paths import REPO_ROOT
from serve_stand_in import kill_servers, notes, serving, stand_in, wait_for

ROOT = REPO_ROOT
CONFIG = str(ROOT / "configs" / "demo-cpu.env")
# The CPU plan trimmed to k {0, 4} x sessions {4}: the grid starts two (stand-in) servers.
ARGS = ["--budget", "1s", "--no-plots"]


def run(argv: list[str]) -> int:
    return options.run(qualify_cli, argv)


def read_state(path: Path) -> dict:
    """The state file as it is on disk, after checking that it loads as a state."""
    QualifyState.load(path, follow_symlinks=False)
    return json.loads(path.read_text(encoding="utf-8"))


def _qualify(out: Path, *extra: str) -> int:
    return run([CONFIG, *ARGS, "--out", str(out), *extra])


def _tree(path: Path) -> dict[str, bytes | str]:
    """Every entry under ``path`` (not following symlinks): file bytes, or what a link points to."""
    found: dict[str, bytes | str] = {}
    for entry in sorted(path.rglob("*")):
        name = str(entry.relative_to(path))
        found[name] = (
            f"-> {os.readlink(entry)}" if entry.is_symlink() else entry.read_bytes() if entry.is_file() else "dir"
        )
    return found


@pytest.fixture
def faked(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, fake in fakes().items():
        monkeypatch.setitem(steps.STEPS, name, fake)


# ----------------------------------------------------------------------------------------------------- --out


def _etc(tmp_path: Path) -> Path:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "shadow").write_text("root:$6$secret:19000:0:99999:7:::\n")
    return etc


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    (home / "report.md").write_text("my own report\n")
    (home / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (home / "notes" / "todo.txt").write_text("call bob\n")
    return home


@pytest.mark.parametrize("case", ["symlink to /etc", "symlink to an empty directory", "someone's home directory"])
def test_an_out_that_is_a_symlink_or_a_foreign_non_empty_directory_is_refused_and_left_untouched(
    tmp_path: Path, faked: None, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if case == "symlink to /etc":
        target = _etc(tmp_path)
    elif case == "symlink to an empty directory":
        target = tmp_path / "empty"
        target.mkdir()
    else:
        target = _home(tmp_path)
    out = target if case == "someone's home directory" else tmp_path / "out"
    if out != target:
        out.symlink_to(target)
    before = _tree(tmp_path)
    assert _qualify(out) == 1
    err = capsys.readouterr().err
    assert ("non-empty directory that holds no qualify run" if out == target else "is a symbolic link") in err
    assert _tree(tmp_path) == before  # nothing written, nothing archived, the lock not even created


def test_an_out_that_is_a_file_is_refused(tmp_path: Path, faked: None, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.write_text("not a directory\n")
    assert _qualify(out) == 1
    assert "exists and is not a directory" in capsys.readouterr().err
    assert out.read_text() == "not a directory\n"


@needs_cpu_extra
def test_the_archive_holds_exactly_the_files_the_run_wrote_and_follows_no_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """During the run, unrelated files appear in OUT and a file and a directory of the run are replaced by symlinks
    (to a stand-in /etc): the archive packs what the run wrote, as plain files, and nothing else."""
    etc = _etc(tmp_path)
    (etc / "logs").mkdir()
    (etc / "logs" / "server.log").write_text("root:$6$secret\n")
    out = tmp_path / "out"
    fake = fakes()

    def acceptance_meets_an_intruder(ctx: steps.Context):  # type: ignore[no-untyped-def]
        outcome = fake["acceptance"](ctx)
        (ctx.out / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
        (ctx.out / "notes").mkdir()
        (ctx.out / "notes" / "todo.txt").write_text("call bob\n")
        written = fake_output(ctx.out, "acceptance")
        written.unlink()
        written.symlink_to(etc / "shadow")
        ctx.record(ctx.out / "logs" / "server.log")
        (ctx.out / "logs").symlink_to(etc / "logs")
        return outcome

    for name, step in {**fake, "acceptance": acceptance_meets_an_intruder}.items():
        monkeypatch.setitem(steps.STEPS, name, step)
    assert _qualify(out) == 0
    err = capsys.readouterr().err
    # fp8, graphs, synthetic: skipped on the CPU plan; amplitude: the demo drafter has no YaRN rope; schedule: one k
    # at this budget; ranking: a shoot-out's step only
    skipped = ("fp8", "graphs", "synthetic", "ranking", "amplitude", "schedule")
    ran = [name for name in fake if name not in skipped]
    expected = {"state.json", "report.md", "lossless/verdict.json", *(f"fake-{n}.json" for n in ran)}
    expected -= {"fake-acceptance.json"}
    with tarfile.open(out.with_name("out.tar.gz")) as tar:
        members = tar.getmembers()
        assert {m.name for m in members} == {f"out/{name}" for name in expected}
        assert all(m.isfile() for m in members)
        assert not any(b"$6$secret" in tar.extractfile(m).read() for m in members)  # type: ignore[union-attr]
    assert "left out of the archive: fake-acceptance.json (a symbolic link" in err
    assert "logs/server.log (a symbolic link, or under one)" in err
    assert "fake-acceptance.json" in read_state(out / "state.json")["files"]


# ------------------------------------------------------------------------------------------------------ lock


def test_a_second_run_on_a_directory_in_use_is_refused_with_the_first_pid_and_touches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run is caught while its grid server starts; a --resume then (the issue: it stopped the first run's
    server) is refused with exit 1 naming the first's pid, and the first finishes undisturbed."""
    notes_dir = tmp_path / "stand-in"
    serve = stand_in(notes_dir, monkeypatch)
    (notes_dir / "hold").touch()
    out = tmp_path / "out"
    # Both runs are processes of their own (a run without the lock would wait on the held start: a timeout here).
    command = [sys.executable, str(ROOT / "tests" / "qualify_fakes.py"), "grid", CONFIG, *ARGS, "--out", str(out),
               "--serve-sh", str(serve)]  # fmt: skip
    env = {**os.environ, "KIMI_PYTHON": sys.executable}  # PYTHONPATH: the checkout and the stand-in's server (stand_in)
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: notes(notes_dir, "started") or first.poll() is not None)
        assert first.poll() is None, first.communicate()
        state_before = (out / "state.json").read_bytes()
        running_before = (out / "grid" / "running.json").read_bytes()

        second = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 1, second.stderr[-3000:]
        assert f"is in use by another qualify run (pid {first.pid}" in second.stderr
        assert notes(notes_dir, "stops") == []  # the first run's server was left alone
        assert (out / "state.json").read_bytes() == state_before
        assert (out / "grid" / "running.json").read_bytes() == running_before
    finally:
        (notes_dir / "hold").unlink()
        stdout, stderr = first.communicate(timeout=300)
        kill_servers(notes_dir)
    assert first.returncode == 0, stderr[-3000:]
    state = read_state(out / "state.json")
    assert state["steps"]["grid"]["status"] == "done" and len(state["runs"]) == 1
    started = [line.split()[0] for line in notes(notes_dir, "started")]
    assert len(started) == 2 and notes(notes_dir, "stops") == started  # each server stopped once, by its own run


def test_a_lock_file_that_is_a_symlink_is_refused_not_followed(
    tmp_path: Path, faked: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    (out / "qualify.lock").symlink_to(elsewhere)
    assert _qualify(out) == 1
    assert "the lock file is a symbolic link" in capsys.readouterr().err
    assert not elsewhere.exists() and not (out / "state.json").exists()


# ------------------------------------------------------------------------------------- a refused --stop


def test_a_refused_stop_fails_the_run_with_exit_1_and_the_report_names_the_server_and_how_to_stop_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue: a run finished PASS, exit 0, with a server of it still up. Here every verdict passes (faked),
    and the grid's first server refuses to stop: the run stops there (no second server beside it), exit 1, and the
    report says which server is up and the command that stops it; a --resume first stops it, then finishes."""
    for name, fake in fakes(keep=("grid",)).items():
        monkeypatch.setitem(steps.STEPS, name, fake)
    notes_dir = tmp_path / "stand-in"
    serve = stand_in(notes_dir, monkeypatch)
    monkeypatch.setenv("KIMI_PYTHON", sys.executable)
    monkeypatch.setenv("STAND_IN_REFUSE_STOP", "1")
    out = tmp_path / "out"
    try:
        assert _qualify(out, "--serve-sh", str(serve)) == 1
        err = capsys.readouterr().err
        [started] = notes(notes_dir, "started")  # the k=4 server was never started beside the one left up
        port = started.split()[0]
        assert serving(int(port))
        stop = f"PORT={port} {serve} {ROOT / 'configs' / 'demo-cpu.env'} --stop"
        assert f"the server on port {port} may still be running" in err and stop in err
        report = (out / "report.md").read_text(encoding="utf-8")
        assert report.startswith("# Qualification of") and ": INCOMPLETE" in report.splitlines()[0]
        assert "**A server of this run is still running**" in report and stop in report
        assert "refusing to signal anything" in report
        state = read_state(out / "state.json")
        assert state["steps"]["grid"]["status"] == "failed" and "acceptance" not in state["steps"]

        monkeypatch.delenv("STAND_IN_REFUSE_STOP")
        assert _qualify(out, "--serve-sh", str(serve), "--resume") == 0
        assert notes(notes_dir, "stops")[:2] == [port, port]  # refused, then stopped by the resume before all else
        assert not serving(int(port))
        state = read_state(out / "state.json")
        assert state["server_left"] == "" and state["steps"]["grid"]["status"] == "done"
        assert "still running" not in (out / "report.md").read_text(encoding="utf-8")
    finally:
        kill_servers(notes_dir)


# ------------------------------------------------------------------------------ read-only, full disk, state


@pytest.mark.parametrize(
    ("failing_save", "code", "says"),
    [
        (1, errno.EACCES, "Make it writable, or name another --out"),  # --out read-only: the first save
        (1, errno.ENOSPC, "Free some space"),
        (8, errno.ENOSPC, "Free some space"),  # the disk fills in the middle of the run (the 8th file written)
    ],
)
def test_an_out_that_cannot_be_written_gets_a_message_and_exit_1_and_the_run_stays_resumable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    faked: None,
    capsys: pytest.CaptureFixture[str],
    failing_save: int,
    code: int,
    says: str,
) -> None:
    from kimi_dflash import documents

    real = documents.write_json_atomic
    saves = []

    def write(path: Path, document: object, **kwargs: object) -> None:
        saves.append(path)
        if len(saves) >= failing_save:
            raise OSError(code, os.strerror(code), str(path))
        real(path, document, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(documents, "write_json_atomic", write)
    out = tmp_path / "out"
    assert _qualify(out) == 1
    err = capsys.readouterr().err
    assert f"qualify: cannot write in --out {out} ({out / 'state.json'}): {os.strerror(code)}. {says}" in err
    assert "Traceback" not in err

    monkeypatch.setattr(documents, "write_json_atomic", real)
    if failing_save > 1:  # what was saved whole is kept by the resume
        kept = [name for name, step in read_state(out / "state.json")["steps"].items() if step["status"] == "done"]
        assert kept == ["environment", "preflight"]
    assert _qualify(out, "--resume") == 0
    assert read_state(out / "state.json")["steps"]["advisor"]["status"] == "done"


def _state_with(**changes: object) -> str:
    """A valid state document (a fresh run of the demo's plan) with ``changes`` (None: the key removed)."""
    from kimi_dflash.qualify.plan import build_plan
    from kimi_dflash.qualify.state import QualifySignature

    values = {"DEVICE": "cpu", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "4"}
    document = QualifyState(signature=QualifySignature(), plan=build_plan(values)).to_json()
    document.update(changes)
    return json.dumps({key: value for key, value in document.items() if value is not None})


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _huge(path: Path) -> None:
    with path.open("wb") as handle:
        handle.truncate(5 * 1024 * 1024)  # sparse: over the state file's cap without writing it


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.write_text("[]"), "the document is list, not an object"),
        (lambda p: p.write_text(_state_with(signature=None)), "($.signature: Field required)"),
        (lambda p: p.write_text(_state_with(steps={"x": 5})), "($.steps.x: Input should be an object)"),
        (
            lambda p: p.write_text(_state_with(files=["../../etc/shadow"])),
            "($.files.0: Value error, not a relative path inside the directory)",
        ),
        (lambda p: p.write_text(_state_with(schema="kimi-dflash/sweep-state")), "(schema 'kimi-dflash/sweep-state'"),
        (lambda p: p.write_text(_state_with(schema_version=2)), "(schema_version 2; this one reads 1 to 1)"),
        (lambda p: p.write_bytes(b'{"schema": "\xff"}'), "is not UTF-8 text"),
        (_fifo, "is a FIFO (named pipe)"),
        (_huge, "over the 4 MiB this reader takes"),
        (lambda p: p.symlink_to(p.parent.parent / "elsewhere.json"), "is a symbolic link"),
    ],
    ids=[
        "list",
        "no signature",
        "step not an object",
        "files outside",
        "other schema",
        "newer version",
        "not utf-8",
        "fifo",
        "huge",
        "symlink",
    ],  # fmt: skip
)
def test_a_malformed_state_file_is_refused_with_a_message_and_the_dry_run_does_not_crash(
    tmp_path: Path,
    faked: None,
    capsys: pytest.CaptureFixture[str],
    make,
    says: str,  # type: ignore[no-untyped-def]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "elsewhere.json").write_text("{}")
    make(out / "state.json")
    before = _tree(tmp_path)
    assert _qualify(out, "--resume") == 1
    err = capsys.readouterr().err
    assert "qualify state file" in err and says in err and "use another --out" in err
    assert "Traceback" not in err
    assert _tree(tmp_path) == {**before, "out/qualify.lock": (out / "qualify.lock").read_bytes()}

    assert _qualify(out, "--dry-run") == 0
    captured = capsys.readouterr()
    assert says in captured.err and "statuses not shown" in captured.err and "[15] report" in captured.out


def test_an_interrupt_says_which_signal_and_exits_130_or_143(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, faked: None, capsys: pytest.CaptureFixture[str]
) -> None:
    for raised, code, name in ((KeyboardInterrupt(), 130, "SIGINT"), (Interrupted("SIGTERM"), 143, "SIGTERM")):

        def interrupted(*args: object, raised: BaseException = raised, **kwargs: object) -> None:
            raise raised

        monkeypatch.setattr(qualify_cli, "run_units", interrupted)
        out = tmp_path / name
        assert _qualify(out) == code
        assert f"qualify: interrupted ({name}); rerun with --resume to finish" in capsys.readouterr().err


def test_a_passing_fake_run_is_what_these_tests_build_on(tmp_path: Path, faked: None) -> None:
    """The control: with every step faked, qualify passes (exit 0) and packs the files; the tests above differ from
    it only by what they break."""
    out = tmp_path / "out"
    assert _qualify(out) == 0
    assert json.loads((out / "lossless" / "verdict.json").read_text()) == PASSING_VERDICT.to_json()
    with tarfile.open(out.with_name("out.tar.gz")) as tar:
        assert "out/report.md" in tar.getnames() and "out/qualify.lock" not in tar.getnames()
