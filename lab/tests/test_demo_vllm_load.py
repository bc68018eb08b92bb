"""vLLM's own model classes load the fabricated demo weights (every tensor placed, nothing left at init values).

Runs `python -m kimi_dflash_lab.demo_vllm_check` in a subprocess (vLLM's distributed state is process-global).
Marked slow: resolving vLLM's engine config takes 20-60 s on 2 cores.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_dflash.demo import ensure_demo_models

pytestmark = pytest.mark.slow


def run_check(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("vllm")
    return subprocess.run(
        [sys.executable, "-m", "kimi_dflash_lab.demo_vllm_check", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_vllm_loads_every_demo_weight_where_it_belongs(tmp_path: Path) -> None:
    result = run_check("--root", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "vllm_check: OK" in result.stdout
    assert "after layers [2, 4]" in result.stdout  # dflash target_layer_ids (1, 3) as vLLM reads them


def test_vllm_check_catches_a_drafter_missing_a_tensor(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    models = ensure_demo_models(tmp_path / "demo", choice="qwen3")
    drafter = tmp_path / "broken-drafter"
    shutil.copytree(models.drafter_dir, drafter)
    weights = load_file(str(drafter / "model.safetensors"))
    del weights["hidden_norm.weight"]
    save_file(weights, str(drafter / "model.safetensors"), metadata={"format": "pt"})
    result = run_check("--target", str(models.target_dir), "--drafter", str(drafter))
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    assert "model.hidden_norm.weight" in result.stdout
