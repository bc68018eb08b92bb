"""The front door: `kimi-dflash --help` lists every verb, each verb answers --help, and a bare config still
means serve (the console script's behaviour before the verbs existed)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from kimi_dflash import cli
from repo_paths import REPO_ROOT as ROOT


def test_front_help_lists_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    listed = set(re.findall(r"^  (\S+)  ", capsys.readouterr().out, re.MULTILINE))
    assert listed == set(cli.BY_NAME)


@pytest.mark.parametrize("verb", [verb.name for verb in cli.VERBS])
def test_each_verb_answers_help(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([verb, "--help"])
    assert exited.value.code == 0
    # Named as it was called, not as the script shim it also serves (serve.sh, compare_results.py, ...).
    assert f"usage: kimi-dflash {verb} " in capsys.readouterr().out


def test_a_bare_config_still_means_serve() -> None:
    def dry_run(*argv: str) -> str:
        done = subprocess.run([sys.executable, "-m", *argv, "demo-cpu", "--dry-run"], capture_output=True, text=True,
                              cwd=ROOT, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert dry_run("kimi_dflash.cli") == dry_run("kimi_dflash.launch.cli") == dry_run("kimi_dflash.cli", "serve")


def test_a_mistyped_verb_is_named_not_served(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bnech", "--sessions", "4"]) == 2
    assert "did you mean 'bench'" in capsys.readouterr().err


def test_no_arguments_prints_the_verbs_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "kimi-dflash <verb>" in capsys.readouterr().err


def test_the_version_verb_names_the_package(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("kimi-dflash 0.")
