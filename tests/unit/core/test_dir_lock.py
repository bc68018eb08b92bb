"""core/dir_lock.py, the one lock of qualify, the sweep and the patcher: this user's alone, and a refusal names only
a pid that holds it now (issue 31 S7)."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_dflash.core.dir_lock import DirectoryBusy, directory_lock


def test_the_lock_file_is_private_even_one_an_older_version_left_readable(tmp_path: Path) -> None:
    (tmp_path / "run.lock").touch(mode=0o644)
    with directory_lock(tmp_path, "run.lock") as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with directory_lock(tmp_path, "fresh.lock") as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_busy_directory_names_the_pid_that_holds_the_lock_now_not_the_last_one_recorded(tmp_path: Path) -> None:
    lock = tmp_path / "run.lock"
    lock.write_text("99999\n")  # what the last run wrote, long gone
    hold = "import fcntl, sys; f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); input()"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(DirectoryBusy) as busy, directory_lock(tmp_path, "run.lock", what="sweep"):
            pass
        message = str(busy.value)
        assert f"in use by another sweep (pid {holder.pid}, lock {lock})" in message
        assert f"kill {holder.pid}" in message and "99999" not in message
    finally:
        holder.kill()
        holder.wait()
    with directory_lock(tmp_path, "run.lock"):  # free once the holder is gone
        pass


def test_a_busy_lock_whose_holder_the_kernel_does_not_name_says_no_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimi_dflash.core import dir_lock

    monkeypatch.setattr(dir_lock, "LOCKS", tmp_path / "no-proc-locks")
    (tmp_path / "run.lock").write_text(f"{os.getpid()}\n")
    with open(tmp_path / "run.lock") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(DirectoryBusy) as busy, directory_lock(tmp_path, "run.lock"):
            pass
    assert "pid" not in str(busy.value) and "kill" not in str(busy.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's file needs root to plant")
def test_a_lock_file_another_user_owns_is_refused(tmp_path: Path) -> None:
    (tmp_path / "run.lock").touch()
    os.chown(tmp_path / "run.lock", 65534, 65534)
    with (
        pytest.raises(Exception, match="the lock file is nobody \\(uid 65534\\)'s"),
        directory_lock(tmp_path, "run.lock"),
    ):
        pass
