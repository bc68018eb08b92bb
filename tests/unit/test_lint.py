"""One linter configuration for the whole code base (pyproject.toml [tool.ruff]): clean and formatted."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import REPO_ROOT

LINTED = ["src", "lab", "tests", "payload", "benchmarks", "patches"]


def ruff() -> list[str]:
    beside = Path(sys.executable).with_name("ruff")  # the dev extra installs it next to the test interpreter
    found = str(beside) if beside.is_file() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: pip install -e '.[dev]' (launchers/setup-cpu.sh does)")
    return [found]


def test_ruff_check_is_clean() -> None:
    result = subprocess.run(
        [*ruff(), "check", "--no-cache", *LINTED], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"ruff check found problems (fix them, or `ruff check --fix`):\n{result.stdout}"


def test_the_code_is_formatted() -> None:
    result = subprocess.run(
        [*ruff(), "format", "--check", "--no-cache", *LINTED],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"run `ruff format {' '.join(LINTED)}`:\n{result.stdout}"
