"""The lab's commands (`python -m kimi_dflash_lab COMMAND`) follow the verbs' one convention (tests/unit/test_cli.py
holds the product's verbs to it), and the synthetic server's command, a tests/ helper, is found from the lab."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import subprocess
import sys

import pytest

from kimi_dflash.core import options
from kimi_dflash_lab.__main__ import COMMANDS
from repo_paths import REPO_ROOT


@pytest.mark.parametrize("module", [module for module, _ in COMMANDS.values()])
def test_every_lab_command_is_add_cli_args_and_main(module: str) -> None:
    """``add_cli_args(parser)`` declares the options (a typed model), ``main(args)`` runs."""
    command = importlib.import_module(module)
    assert callable(command.add_cli_args) and len(inspect.signature(command.main).parameters) == 1
    parser = options.build_parser(command, "probe")
    assert parser.model is not None and dataclasses.is_dataclass(parser.model)  # type: ignore[attr-defined]


def test_the_synthetic_command_runs_with_only_src_and_lab_on_the_path() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / tree) for tree in ("src", "lab"))}
    command = [sys.executable, "-m", "kimi_dflash_lab", "synthetic", "--help"]
    done = subprocess.run(command, cwd=REPO_ROOT / "lab", env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--chunk-interval-ms" in done.stdout
