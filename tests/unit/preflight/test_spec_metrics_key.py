"""PER_REQUEST_SPEC_METRICS: the plan sends --per-request-spec-decode-metrics only with speculation, and the
compatibility check refuses it on a vLLM release without the flag (read from the released wheels)."""

from __future__ import annotations

from kimi_dflash.config.validate import load_config
from kimi_dflash.plan import build_plan
from repo_paths import CONFIGS_DIR

FLAG = "--per-request-spec-decode-metrics"


def _plan(name: str, **environ: str):
    config = load_config(CONFIGS_DIR / name, environ=environ)
    return config, build_plan(config, "python", "/cache")


def test_the_key_adds_the_flag_with_speculation_only() -> None:
    _, plan = _plan("production.env", PER_REQUEST_SPEC_METRICS="summary")
    argv = list(plan.argv)
    assert argv[argv.index(FLAG) + 1] == "summary"
    assert FLAG not in _plan("production.env")[1].argv  # off by default
    # vLLM refuses the flag without speculative decoding; the baseline extends the DFlash config and must start
    assert FLAG not in _plan("production.env", PER_REQUEST_SPEC_METRICS="detailed", SPECULATIVE_METHOD="none")[1].argv
