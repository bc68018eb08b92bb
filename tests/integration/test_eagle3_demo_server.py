"""The CPU demo's second drafter kind on a real vLLM CPU server (issue 28, item 3): the miniature Kimi with its
EAGLE3-MLA drafter (configs/demo-cpu-eagle3.env) is lossless at T=0 against the autoregressive demo and its drafts
are accepted. One extra server (~30-60 s) besides the session's baseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench_helpers import run_benchmark
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.server


def test_eagle3_mla_is_lossless_and_accepted(demo_server_factory, baseline_demo_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    eagle3 = demo_server_factory("demo-cpu-eagle3.env")
    try:
        assert "Resolved architecture: Eagle3DeepseekV3ForCausalLM" in eagle3.log_text()
        validated = subprocess.run(
            [sys.executable, str(REPO_ROOT / "payload" / "validate.py"), "--reference", baseline_demo_server.base_url,
             "--candidate", eagle3.base_url, "--prompts", "4", "--max-tokens", "64", "--math-problems", "2",
             "--math-max-tokens", "32"],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert validated.returncode == 0, validated.stdout + validated.stderr
        assert "4/4 outputs token-identical" in validated.stdout and "verdict     PASS" in validated.stdout
        result = tmp_path / "eagle3.json"
        bench = run_benchmark(
            "--base-url", eagle3.base_url, "--model", eagle3.model, "--sessions", "2", "--turns-per-session", "1",
            "--max-tokens", "64", "--ignore-eos", "--seed", "1", "--output", str(result), timeout=600,
        )  # fmt: skip
        assert bench.returncode == 0, bench.stderr[-2000:]
        spec = json.loads(result.read_text())["results"][0]["spec_decode"]
        assert spec["num_speculative_tokens"] == 3 and spec["accepted_tokens"] > 0
        assert spec["per_position"][0] > 0.5, spec  # the walk's deliberate misses cost ~15 % per token
    finally:
        demo_server_factory.stop(eagle3)
