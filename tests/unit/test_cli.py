"""The front door: `kimi-dflash --help` lists every verb, each verb answers --help, and a bare config still
means serve (the console script's behaviour before the verbs existed)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import re
import subprocess
import sys

import pytest

from kimi_dflash import cli
from kimi_dflash.core import options
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


# -- one way to declare a verb's options (core/options.py) ---------------------------------------------------------
# vLLM's own parser, kept where the lab runs vLLM's own command lines through it (not a parser of ours).
VLLMS_PARSER = {
    "lab/kimi_dflash_lab/dry_engine/child.py": "`vllm serve`'s parser, on the plan's argv (the dry engine)",
    "lab/kimi_dflash_lab/studies/crosscheck.py": "`vllm bench serve`'s parser, run in-process",
}
# Children and pass-throughs: a JSON request from their parent, or argv handed on to vLLM; no verb.
NOT_VERBS = {
    "src/kimi_dflash/preflight/runtime_child.py", "src/kimi_dflash/preshard/save_child.py",
    "src/kimi_dflash/vllm_entry.py", "src/kimi_dflash/core/paths.py", "lab/kimi_dflash_lab/dry_engine/child.py",
}  # fmt: skip
OPTIONS = "src/kimi_dflash/core/options.py"


@functools.cache
def _python_files() -> dict[str, ast.Module]:
    trees = ("src", "lab/kimi_dflash_lab", "payload", "patches", "benchmarks")
    return {
        str(p.relative_to(ROOT)): ast.parse(p.read_text(encoding="utf-8"))
        for t in trees
        for p in (ROOT / t).rglob("*.py")
    }


def _names(tree: ast.Module) -> list[str]:
    """The names called (``f(...)``, ``x.f(...)``), defined (``def f``) and read as ``sys.argv``, in code only."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            found.append(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
        elif isinstance(node, ast.FunctionDef):
            found.append(f"def {node.name}")
        elif isinstance(node, ast.Attribute) and node.attr == "argv" and getattr(node.value, "id", "") == "sys":
            found.append("sys.argv")
    return found


def test_parsers_are_built_in_one_place() -> None:
    """No ArgumentParser is made, and no argv parsed, anywhere but core/options.py (vLLM's parser aside)."""
    banned = {"ArgumentParser", "parse_args", "parse_known_args", "def parse_args", "def build_parser"}
    found = {path: sorted(banned & set(_names(tree))) for path, tree in _python_files().items() if path != OPTIONS}
    assert {path: names for path, names in found.items() if names and path not in VLLMS_PARSER} == {}
    for path in VLLMS_PARSER:
        assert found[path] == ["parse_args"] and "FlexibleArgumentParser" in _names(_python_files()[path]), path


def test_every_script_starts_its_command_through_options() -> None:
    """A module run as a script hands its command line to options.run; none reads sys.argv itself."""
    readers = {OPTIONS, "src/kimi_dflash/cli.py", "lab/kimi_dflash_lab/__main__.py", *NOT_VERBS}
    for path, tree in _python_files().items():
        names = _names(tree)
        main_block = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
        if main_block and path not in NOT_VERBS and not path.endswith("__main__.py"):
            assert "run" in names and "options" in ast.unparse(tree), f"{path} starts without core/options.run"
        assert path in readers or "sys.argv" not in names, f"{path} reads sys.argv itself"


@pytest.mark.parametrize("module", [verb.module for verb in cli.VERBS])
def test_every_verb_is_add_cli_args_and_main(module: str) -> None:
    """The one convention: ``add_cli_args(parser)`` declares the options (a typed model), ``main(args)`` runs (the
    lab's commands too: lab/tests/test_lab_commands.py)."""
    verb = importlib.import_module(module)
    assert callable(verb.add_cli_args) and len(inspect.signature(verb.main).parameters) == 1
    parser = options.build_parser(verb, "probe")
    assert parser.model is not None and dataclasses.is_dataclass(parser.model)  # type: ignore[attr-defined]


def test_qualify_keeps_its_own_usage_exit(capsys: pytest.CaptureFixture[str]) -> None:
    """qualify's 2 means a failed verdict, so a bad argument exits 1, through the front door too."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["qualify", "demo-cpu", "--no-such-option"])
    assert exited.value.code == 1 and "unrecognized arguments: --no-such-option" in capsys.readouterr().err
