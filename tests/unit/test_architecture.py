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


def test_a_back_pointing_import_breaks_the_layers(tmp_path: Path) -> None:
    shutil.copy2(REPO_ROOT / "pyproject.toml", tmp_path)
    for tree in ("src", "lab"):
        shutil.copytree(REPO_ROOT / tree, tmp_path / tree, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    leaf = tmp_path / "src" / "kimi_dflash" / "core" / "errors.py"
    leaf.write_text(leaf.read_text(encoding="utf-8") + "\nfrom kimi_dflash.bench import records  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "kimi_dflash.core is not allowed to import kimi_dflash.bench" in result.stdout
    assert "kimi_dflash.core.errors -> kimi_dflash.bench.records" in result.stdout


def test_the_product_never_imports_the_lab(tmp_path: Path) -> None:
    shutil.copy2(REPO_ROOT / "pyproject.toml", tmp_path)
    for tree in ("src", "lab"):
        shutil.copytree(REPO_ROOT / tree, tmp_path / tree, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    plan = tmp_path / "src" / "kimi_dflash" / "plan.py"
    plan.write_text(plan.read_text(encoding="utf-8") + "\nimport kimi_dflash_lab.synthetic  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "kimi_dflash.plan -> kimi_dflash_lab.synthetic" in result.stdout


def test_a_recipe_import_of_the_benchmark_breaks_their_independence(tmp_path: Path) -> None:
    # The layers allow it (the benchmark sits below the recipe); the independence contract must not.
    shutil.copy2(REPO_ROOT / "pyproject.toml", tmp_path)
    for tree in ("src", "lab"):
        shutil.copytree(REPO_ROOT / tree, tmp_path / tree, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    plan = tmp_path / "src" / "kimi_dflash" / "plan.py"
    plan.write_text(plan.read_text(encoding="utf-8") + "\nfrom kimi_dflash.bench import records  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "the recipe never imports the" in result.stdout
        and "kimi_dflash.plan -> kimi_dflash.bench.records" in result.stdout
    )
