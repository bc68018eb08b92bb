"""The launcher's files in the project cache (port locks, pid records, the default log) stay this user's: a cache
or run directory other users could write is refused with the fix, and no file is opened through a planted symlink
(issue 25, item 4: a symlink on the port's lock made root create a file in a root-only directory)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from extras import needs_cpu_extra
from kimi_dflash.launch import ownership
from kimi_dflash.launch.private_files import UnsafeLocation, open_private, private_dir
from repo_paths import CONFIGS_DIR
from serve_helpers import run_serve, tiny_cpu_config
from server_fixtures import free_port

OTHER_UID = 54321  # a user that is not the test's (made the owner with chown: needs root)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root (chown)")


def _serve(cache: Path, *args: str, config: Path = CONFIGS_DIR / "demo-cpu.env", port: int | None = None):
    return run_serve(str(config), *args, env={"PORT": str(port or free_port()), "KIMI_DFLASH_CACHE": str(cache)})


def test_new_directories_and_files_are_this_users_alone(tmp_path: Path) -> None:
    run = private_dir(tmp_path / "cache" / "run", follow_symlinks=False)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    os.close(open_private(run / "serve-1.lock", os.O_RDWR | os.O_CREAT))
    assert stat.S_IMODE((run / "serve-1.lock").stat().st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o722])
def test_a_directory_others_can_write_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)  # 1777: a sticky bit does not stop others creating files (or symlinks) there
    with pytest.raises(UnsafeLocation, match=f"chmod 700 {shared}") as refusal:
        private_dir(shared)
    assert "KIMI_DFLASH_CACHE" in str(refusal.value)


@needs_root
def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeLocation, match="not to you"):
        private_dir(theirs)


def test_a_symlinked_run_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeLocation, match="symbolic link"):
        private_dir(tmp_path / "run", follow_symlinks=False)


def test_the_port_lock_is_never_opened_through_a_symlink(tmp_path: Path) -> None:
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    lock = tmp_path / "serve-1234.lock"
    lock.symlink_to(root_only / "created-by-the-launcher")
    with pytest.raises(UnsafeLocation, match="symbolic link"), ownership.port_lock(lock):
        pass
    assert not (root_only / "created-by-the-launcher").exists()


def test_a_fifo_lock_is_refused_without_blocking(tmp_path: Path) -> None:
    lock = tmp_path / "serve-1234.lock"
    os.mkfifo(lock)
    with pytest.raises(UnsafeLocation, match="not a regular file"), ownership.port_lock(lock):
        pass


@needs_root
def test_a_lock_of_another_user_is_refused(tmp_path: Path) -> None:
    # Another user who owns (or can open) the lock can hold it and block every start and stop on that port.
    lock = tmp_path / "serve-1234.lock"
    lock.write_text("")
    os.chown(lock, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeLocation, match="belongs to"), ownership.port_lock(lock):
        pass


def test_an_old_readable_lock_is_made_private(tmp_path: Path) -> None:
    lock = tmp_path / "serve-1234.lock"
    lock.write_text("")
    lock.chmod(0o644)  # others could open it read-only and flock it
    with ownership.port_lock(lock):
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600


@pytest.mark.parametrize("args", [["--stop"], ["--wait", "--skip-preflight"], ["--preflight", "--no-dry-engine"]])
def test_serve_refuses_a_world_writable_cache(tmp_path: Path, args: list[str]) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o1777)
    # --preflight with the demo config would fabricate the demo models there (which vLLM then loads)
    config = CONFIGS_DIR / "demo-cpu.env" if args[0] != "--wait" else tiny_cpu_config(tmp_path)
    result = _serve(cache, *args, config=config)
    assert result.returncode == 1, result.stderr
    assert f"chmod 700 {cache}" in result.stderr and "Traceback" not in result.stderr
    assert list(cache.iterdir()) == []  # no demo models, no run/ or logs/, no lock, no pid file


@needs_root
def test_serve_refuses_a_run_directory_of_another_user(tmp_path: Path) -> None:
    run = tmp_path / "cache" / "run"
    run.mkdir(parents=True, mode=0o700)
    os.chown(run, OTHER_UID, OTHER_UID)
    result = _serve(tmp_path / "cache", "--stop")
    assert result.returncode == 1 and "not to you" in result.stderr, result.stderr
    assert list(run.iterdir()) == []


@needs_cpu_extra
def test_serve_never_follows_a_planted_lock_symlink(tmp_path: Path) -> None:
    port = free_port()
    run = tmp_path / "cache" / "run"
    run.mkdir(parents=True, mode=0o700)
    (tmp_path / "root-only").mkdir(mode=0o700)
    (run / f"serve-{port}.lock").symlink_to(tmp_path / "root-only" / "planted")
    config = tiny_cpu_config(tmp_path)  # the lock is taken after the models and the checks: none to build or run
    for verb in (["--stop"], ["--wait", "--skip-preflight"]):
        result = _serve(tmp_path / "cache", *verb, config=config, port=port)
        assert result.returncode == 1 and "symbolic link" in result.stderr, result.stderr
    assert not (tmp_path / "root-only" / "planted").exists()


def test_serve_never_follows_a_planted_default_log_symlink(tmp_path: Path) -> None:
    port = free_port()
    logs = tmp_path / "cache" / "logs"
    logs.mkdir(parents=True, mode=0o700)
    (tmp_path / "root-only").mkdir(mode=0o700)
    (logs / f"serve-{port}.log").symlink_to(tmp_path / "root-only" / "planted")
    config = tiny_cpu_config(tmp_path)
    result = _serve(tmp_path / "cache", "--wait", "--skip-preflight", config=config, port=port)
    assert result.returncode == 1 and "symbolic link" in result.stderr, result.stderr
    assert "vLLM pid" not in result.stderr  # refused before anything started
    assert not (tmp_path / "root-only" / "planted").exists()
    assert not (tmp_path / "cache" / "run" / f"serve-{port}.pid").exists()
