"""The benchmark runs on a client box: only aiohttp, numpy, pydantic (the result model) and the standard library.

The test copies just payload/benchmark_multi_turn.py, src/kimi_dflash/__init__.py, src/kimi_dflash/core/ and
src/kimi_dflash/bench/ into a temporary tree (what a user would copy), hides every other copy of the project on
sys.path (the checkout's src/ and an editable install), and blocks torch, vllm, python-dotenv, matplotlib and uvloop
with a sys.meta_path finder. --help and a real run must work. The synthetic server it runs against is an
instrument outside bench/, started from the full checkout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from bench_helpers import BENCH_SCRIPT, REPO
from synthetic_server import running

BLOCKED = ("torch", "vllm", "dotenv", "matplotlib", "uvloop", "transformers")

BOOT = r"""
import importlib.abc, runpy, sys
from pathlib import Path

blocked, copy_root, script, *args = sys.argv[1:]
blocked = set(blocked.split(","))

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is blocked: a client box does not have it")
        return None

sys.meta_path.insert(0, Blocker())
# Hide every other copy of the project (the checkout's src/, an editable install's path entry) so the
# script must fall back to the copied src/.
def other_copy(entry):
    where = Path(entry or ".").resolve()
    return (where / "kimi_dflash").is_dir() and not where.is_relative_to(Path(copy_root).resolve())
sys.path[:] = [p for p in sys.path if not other_copy(p)]
for name in [m for m in sys.modules if m == "kimi_dflash" or m.startswith("kimi_dflash.")]:
    del sys.modules[name]
sys.argv = [script, *args]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    loaded = sorted(m.split(".")[0] for m in sys.modules)
    print("IMPORTED-FROM", sys.modules["kimi_dflash"].__file__, file=sys.stderr)
    print("HEAVY", [m for m in blocked if m in loaded], file=sys.stderr)
"""


def client_box(tmp_path: Path) -> Path:
    root = tmp_path / "client-box"
    (root / "payload").mkdir(parents=True)
    shutil.copy2(BENCH_SCRIPT, root / "payload")
    (root / "src" / "kimi_dflash").mkdir(parents=True)
    shutil.copy2(REPO / "src" / "kimi_dflash" / "__init__.py", root / "src" / "kimi_dflash")
    for package in ("core", "bench"):  # the benchmark and the standard-library leaf it stands on
        shutil.copytree(REPO / "src" / "kimi_dflash" / package, root / "src" / "kimi_dflash" / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    return root


def run_isolated(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = root / "payload" / "benchmark_multi_turn.py"
    cmd = [sys.executable, "-c", BOOT, ",".join(BLOCKED), str(root), str(script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=root, check=False)


def test_help_works_without_heavy_packages(tmp_path: Path) -> None:
    root = client_box(tmp_path)
    proc = run_isolated(root, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--sessions" in proc.stdout and "--metrics-url" in proc.stdout
    assert f"IMPORTED-FROM {root}" in proc.stderr  # the copy, not the installed project
    assert "HEAVY []" in proc.stderr


def test_a_real_run_works_without_heavy_packages(tmp_path: Path) -> None:
    root = client_box(tmp_path)
    out = tmp_path / "standalone.json"
    with running(["--ttft-ms", "20", "--chunk-interval-ms", "5", "--spec-tokens", "2", "--chunk-tokens", "2"]) as url:
        proc = run_isolated(root, "--base-url", url, "--sessions", "2", "--turns-per-session", "2",
                            "--max-tokens", "8", "--output", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr
    doc = json.loads(out.read_text())
    assert doc["tool"]["event_loop"] == "asyncio"  # uvloop blocked: the fallback loop ran
    level = doc["results"][0]
    assert level["completed"] == 4 and level["spec_decode"]["acceptance_length"] == 2.0
