"""Packages are layered by where their code runs and arrows point one way: import-linter's contracts in
pyproject.toml hold for the tree, and they do break on a back-pointing import (checked on a copy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import REPO_ROOT

pytest.importorskip("importlinter", reason="import-linter is in the dev extra")


def lint_imports(project: Path) -> subprocess.CompletedProcess[str]:
    """Run lint-imports on the project at ``project`` (its pyproject.toml, its src/ and lab/ first on the path)."""
    command = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; c()"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(project / "src"), str(project / "lab")))}
    return subprocess.run(command + ["--no-cache"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_the_layer_contracts_hold() -> None:
    result = lint_imports(REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def lint_with_an_added_import(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of the project where ``module`` (a path under src/) gets one more import line."""
    shutil.copy2(REPO_ROOT / "pyproject.toml", tmp_path)
    for tree in ("src", "lab"):
        shutil.copytree(REPO_ROOT / tree, tmp_path / tree, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "src" / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}  # noqa\n")
    return lint_imports(tmp_path)


def test_a_back_pointing_import_breaks_the_layers(tmp_path: Path) -> None:
    result = lint_with_an_added_import(tmp_path, "kimi_dflash/core/errors.py", "from kimi_dflash.bench import records")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "kimi_dflash.core is not allowed to import kimi_dflash.bench" in result.stdout
    assert "kimi_dflash.core.errors -> kimi_dflash.bench.records" in result.stdout


def test_the_product_never_imports_the_lab(tmp_path: Path) -> None:
    result = lint_with_an_added_import(tmp_path, "kimi_dflash/plan.py", "import kimi_dflash_lab.synthetic")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "kimi_dflash.plan -> kimi_dflash_lab.synthetic" in result.stdout


def test_a_recipe_import_of_the_benchmark_breaks_their_independence(tmp_path: Path) -> None:
    # The layers allow it (the benchmark sits below the recipe); the independence contract must not.
    result = lint_with_an_added_import(tmp_path, "kimi_dflash/plan.py", "from kimi_dflash.bench import records")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the recipe never imports the" in result.stdout
    assert "kimi_dflash.plan -> kimi_dflash.bench.records" in result.stdout
