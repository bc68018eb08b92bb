"""Packages are layered by where their code runs and arrows point one way: import-linter's contracts in
pyproject.toml hold for the tree, and they do break on a back-pointing import (checked on a copy). The product's unit
tests check the product alone: neither they nor the helpers they import use the lab."""

from __future__ import annotations

import ast
import os
import re
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
    result = lint_with_an_added_import(tmp_path, "kimi_dflash/plan.py", "import kimi_dflash_lab.matrix")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "kimi_dflash.plan -> kimi_dflash_lab.matrix" in result.stdout


def test_a_recipe_import_of_the_benchmark_breaks_their_independence(tmp_path: Path) -> None:
    # The layers allow it (the benchmark sits below the recipe); the independence contract must not.
    result = lint_with_an_added_import(tmp_path, "kimi_dflash/plan.py", "from kimi_dflash.bench import records")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the recipe never imports the" in result.stdout
    assert "kimi_dflash.plan -> kimi_dflash.bench.records" in result.stdout


LAB = "kimi_dflash_lab"
TESTS = REPO_ROOT / "tests"


def _helper(name: str) -> Path | None:
    """The tests/ helper module (or package) an import's top-level name refers to, if any."""
    for path in (TESTS / f"{name}.py", TESTS / name / "__init__.py"):
        if path.is_file():
            return path
    return None


def lab_uses(path: Path) -> tuple[list[str], list[Path]]:
    """What in ``path`` uses the lab (an import of it, a string that runs one of its modules) and the tests/ helper
    modules it imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    uses: list[str] = []
    helpers: list[Path] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            runs = node.value.startswith(LAB) or re.search(rf"-m\s+{LAB}\b", node.value)
            uses += [f"line {node.lineno}: runs {node.value.strip()[:60]!r}"] if runs else []
            continue
        else:
            continue
        for name in names:
            if name.split(".")[0] == LAB:
                uses.append(f"line {node.lineno}: imports {name}")
            elif (helper := _helper(name.split(".")[0])) is not None:
                helpers.append(helper)
    if path.name == "__init__.py":  # a helper package: its modules too
        helpers += [p for p in path.parent.glob("*.py") if p != path]
    return sorted(uses, key=lambda use: int(use.split(":")[0].split()[1])), helpers


def test_the_product_unit_tests_never_use_the_lab() -> None:
    """tests/unit checks the product alone: no test there, nor any tests/ helper it reaches, imports the lab or runs
    one of its modules (a check that needs the lab is the lab's: lab/tests)."""
    todo = sorted((REPO_ROOT / "tests" / "unit").rglob("*.py")) + [TESTS / "conftest.py"]
    seen = {Path(__file__).resolve()}  # this file names the lab to look for it
    found: dict[str, list[str]] = {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        uses, helpers = lab_uses(path)
        if uses:
            found[str(path.relative_to(REPO_ROOT))] = uses
        todo += helpers
    assert found == {}
    assert TESTS / "synthetic_server" / "process.py" in seen  # the walk does reach the helpers


def test_the_lab_use_check_sees_imports_and_module_runs(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import kimi_dflash_lab.matrix\nfrom kimi_dflash_lab import lab_environ\nimport repo_paths\n"
        "ARGV = ['python', '-m', 'kimi_dflash_lab.synthetic']\nSH = 'python -m kimi_dflash_lab synthetic --port 0'\n"
        "NOTE = 'lab/kimi_dflash_lab/matrix.py is only named'\n"
    )
    uses, helpers = lab_uses(probe)
    assert [use.split(":")[0] for use in uses] == ["line 1", "line 2", "line 4", "line 5"]
    assert helpers == [TESTS / "repo_paths.py"]
