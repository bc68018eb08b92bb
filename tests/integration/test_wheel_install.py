"""The package works installed from a wheel, far from any checkout (issue 10: no package code reaches into the
repository): the shipped configs, the launcher's dry run and the benchmark's CLI all come from site-packages.

Slow: building the wheel, a fresh venv and its three small dependencies from the package index (~20-60 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from checkout_helpers import fresh_checkout
from kimi_dflash import cli

pytestmark = pytest.mark.slow


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "KIMI_PYTHON"}}
    return {**env, **extra}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with only the wheel (and its core dependencies) in it; returns its bin/ directory."""
    root = tmp_path_factory.mktemp("wheel")
    checkout = fresh_checkout(root / "checkout")  # a build writes build/ and *.egg-info next to the sources
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(root / "dist"),
            str(checkout),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(),
    )
    assert built.returncode == 0, built.stderr
    [wheel] = (root / "dist").glob("kimi_k26_dflash-*.whl")
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    bin_dir = root / "venv" / "bin"
    pip = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--progress-bar", "off", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
        env=clean_env(),
    )
    assert pip.returncode == 0, pip.stderr
    return bin_dir


def run_outside(bin_dir: Path, tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """Run from an empty directory with a private cache: nothing of the checkout is reachable."""
    return subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(
            KIMI_DFLASH_CACHE=str(tmp_path / "cache"), PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        ),
    )


def test_the_package_is_imported_from_the_venv_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    where = run_outside(
        installed,
        tmp_path,
        str(installed / "python"),
        "-c",
        "import kimi_dflash, pathlib; print(pathlib.Path(kimi_dflash.__file__).resolve())",
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to((installed.parent).resolve())


def test_dry_run_of_a_shipped_config_by_name(installed: Path, tmp_path: Path) -> None:
    result = run_outside(installed, tmp_path, str(installed / "kimi-dflash"), "demo-cpu", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "kimi_dflash.vllm_entry serve" in result.stdout and "--speculative-config" in result.stdout
    assert str(tmp_path / "cache" / "demo") in result.stdout  # demo models would live in the user's cache


def test_dry_run_of_a_config_file_and_what_it_extends(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "mine.env").write_text("EXTENDS=demo-cpu.env\nPORT=9123\n")
    (tmp_path / "demo-cpu.env").write_text(  # not the shipped demo-cpu.env: EXTENDS resolves next to mine.env
        "MODEL_DIR=/models/kimi-k2.6\nDRAFT_MODEL_DIR=/models/drafter\nSERVED_MODEL_NAME=mine\n"
    )
    result = run_outside(installed, tmp_path, str(installed / "kimi-dflash"), "mine.env", "--dry-run")
    assert result.returncode == 0, result.stderr
    argv = result.stdout.split()
    assert argv[argv.index("--port") + 1] == "9123" and argv[argv.index("--served-model-name") + 1] == "mine"


def test_a_missing_config_names_the_shipped_ones(installed: Path, tmp_path: Path) -> None:
    result = run_outside(installed, tmp_path, str(installed / "kimi-dflash"), "no-such-config", "--dry-run")
    assert result.returncode == 2
    assert "config file not found" in result.stderr and "demo-cpu" in result.stderr and "production" in result.stderr


def test_the_benchmark_cli_answers(installed: Path, tmp_path: Path) -> None:
    result = run_outside(installed, tmp_path, str(installed / "python"), "-m", "kimi_dflash.bench", "--help")
    assert result.returncode == 0, result.stderr
    assert "--sessions" in result.stdout


@pytest.mark.parametrize("verb", [verb.name for verb in cli.VERBS])
def test_each_verb_answers_help_from_the_wheel(installed: Path, tmp_path: Path, verb: str) -> None:
    """The front door's verbs need nothing of the checkout and nothing beyond the core dependencies to explain
    themselves."""
    result = run_outside(installed, tmp_path, str(installed / "kimi-dflash"), verb, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def test_the_front_door_lists_its_verbs_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    result = run_outside(installed, tmp_path, str(installed / "kimi-dflash"), "--help")
    assert result.returncode == 0, result.stderr
    assert all(f"  {verb.name} " in result.stdout for verb in cli.VERBS)
