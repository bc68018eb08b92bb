"""The CPU demo served from its own pre-shard (payload/preshard_kimi26.py): same token ids at T=0 as the original.

Costs one pre-shard run (vLLM loads the demo once, ~1-2 min) and one extra demo server; the original is the
session's demo server. Load times of both servers (vLLM's "Loading weights took" line) are printed, not asserted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_demo_server import chat, served_model_dir  # noqa: E402  (shared helpers)

from kimi_dflash.preflight.manifest import read_manifest
from repo_paths import CONFIGS_DIR, REPO_ROOT

pytestmark = [pytest.mark.server, pytest.mark.slow]

PROMPTS = ("Hello", "Write a haiku about the sea.", "What is 17 * 23? Think step by step.")


def weight_load_seconds(log: str) -> float:
    """The target's weight load time from vLLM's log (the first "Loading weights took"; the drafter's follows)."""
    match = re.search(r"Loading weights took ([0-9.]+) seconds", log)
    assert match, "vLLM's log has no 'Loading weights took' line"
    return float(match.group(1))


@pytest.fixture(scope="module")
def preshard_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("preshard") / "demo-tp1"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "payload" / "preshard_kimi26.py"),
            str(CONFIGS_DIR / "demo-cpu.env"),
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return output


def test_demo_served_from_its_preshard_gives_the_same_tokens(demo_server, demo_server_factory, preshard_dir) -> None:
    manifest = read_manifest(preshard_dir)
    assert manifest.tensor_parallel_size == 1 and manifest.format == "sharded_state"
    assert list(manifest.files) == ["model-rank-0-part-0.safetensors"]
    presharded = demo_server_factory("demo-cpu.env", {"PRESHARD_DIR": str(preshard_dir)})
    assert served_model_dir(presharded) == preshard_dir
    log = presharded.log_text()
    assert "load_format=sharded_state" in log
    for prompt in PROMPTS:
        original, from_preshard = chat(demo_server, prompt), chat(presharded, prompt)
        assert from_preshard["choices"][0]["token_ids"] == original["choices"][0]["token_ids"], prompt
    print(
        f"\nweight load: original {weight_load_seconds(demo_server.log_text()):.2f} s, "
        f"pre-shard {weight_load_seconds(log):.2f} s"
    )
    demo_server_factory.stop(presharded)


def test_preflight_refuses_the_preshard_for_another_tp_size(preshard_dir: Path, tmp_path: Path) -> None:
    manifest_path = preshard_dir / "kimi-dflash-preshard.json"
    forged = tmp_path / "forged"
    forged.mkdir()
    for path in preshard_dir.iterdir():
        (forged / path.name).symlink_to(path)
    (forged / manifest_path.name).unlink()
    (forged / manifest_path.name).write_text(
        manifest_path.read_text().replace('"tensor_parallel_size": 1', '"tensor_parallel_size": 2')
    )
    result = subprocess.run(
        [str(REPO_ROOT / "serve.sh"), str(CONFIGS_DIR / "demo-cpu.env"), "--preflight"],
        env={**os.environ, "PRESHARD_DIR": str(forged), "KIMI_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 1
    assert "[FAIL] pre-shard" in result.stdout + result.stderr
    assert "made for TP 2, the plan serves TP 1" in result.stdout + result.stderr
