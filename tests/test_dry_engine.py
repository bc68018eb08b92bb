"""The dry engine (preflight/dry_engine.py): vLLM's own start-up code on the CPU demo's plan, and on a broken
variant, agreeing with the source rules' start-up verdict. Slow: each plan imports vLLM in a child (10-150 s)."""

from __future__ import annotations

import json

import pytest

from kimi_dflash.paths import cache_root
from kimi_dflash.preflight.compat import check_compat
from kimi_dflash.preflight.compat_rules import RULES
from kimi_dflash.preflight.deployment import deployment_from_command
from kimi_dflash.preflight.dry_engine import run_dry_engine
from kimi_dflash.preflight.runtime_probe import vllm_package_dir
from kimi_dflash.preflight.vllm_source import VllmSource

pytestmark = pytest.mark.slow
DEMO = cache_root() / "demo" / "qwen3"
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}


def command(spec: dict) -> list[str]:
    spec = {"method": "dflash", "model": str(DEMO / "drafter"), "num_speculative_tokens": 4, **spec}
    return [
        "vllm", "serve", str(DEMO / "target"), "--dtype", "float32", "--max-model-len", "4096", "--block-size", "16",
        "--enforce-eager", "--no-enable-prefix-caching", "--speculative-config", json.dumps(spec),
    ]  # fmt: skip


@pytest.mark.skipif(not (DEMO / "target").is_dir() or vllm_package_dir() is None, reason="no demo models / vLLM")
@pytest.mark.parametrize("spec", [{}, {"num_speculative_tokenz": 4}], ids=["demo", "misspelled-key"])
def test_the_dry_engine_agrees_with_the_start_up_rules(spec: dict) -> None:
    argv = command(spec)
    source = VllmSource.from_package_dir(vllm_package_dir())
    static = check_compat(deployment_from_command("cpu", argv, ENV), source, RULES)
    dry = run_dry_engine(argv, env=ENV)
    assert dry.starts == static.starts, (dry.render(), static.render())
    if dry.starts:
        assert dry.report["runner"] == "V1" and dry.report["target_attention"] == "CPU_ATTN"
    else:
        assert "num_speculative_tokenz" in str(dry.report["error"])
