"""The INT4 miniature (configs/demo-kimi-int4-cpu.env) makes production's MoE-backend failure catchable on CPU.

Kimi K2.6's routed experts are INT4 compressed-tensors (WNA16); from vLLM 0.27 `--moe-backend aiter` on them
raises at model construction. The project refuses it before vLLM starts (the config rules for MOE_BACKEND, the
compatibility check for anything that reaches the plan); started anyway, vLLM 0.32 CPU raises production's own
error on the miniature, so the check is shown to agree with vLLM, not with itself.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from repo_paths import CONFIGS_DIR, REPO_ROOT
from server_fixtures import free_port, serve_env

SERVE = str(REPO_ROOT / "serve.sh")


INT4_CONFIG = str(CONFIGS_DIR / "demo-kimi-int4-cpu.env")


def test_aiter_moe_backend_is_refused_before_vllm_starts(tmp_path: Path) -> None:
    env = serve_env(free_port())
    env["MOE_BACKEND"] = "aiter"
    env["KIMI_DFLASH_CACHE"] = str(tmp_path / "cache")
    result = subprocess.run(
        [SERVE, INT4_CONFIG, "--wait"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 2, result.stderr
    assert "MOE_BACKEND=aiter" in result.stderr and "nothing was started" in result.stderr
    assert not (tmp_path / "cache" / "logs").exists()  # no vLLM log: vLLM never ran


def test_the_int4_plan_points_at_the_int4_checkpoint(tmp_path: Path) -> None:
    env = serve_env(free_port())
    env["KIMI_DFLASH_CACHE"] = str(tmp_path / "cache")
    result = subprocess.run(
        [SERVE, INT4_CONFIG, "--dry-run"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert f"{tmp_path / 'cache' / 'demo' / 'kimi' / 'target-int4'} " in result.stdout
    assert "No WNA16 MoE backend supports the deployment configuration" in result.stderr  # the config's warning
