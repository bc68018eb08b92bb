"""PER_REQUEST_SPEC_METRICS: the plan sends --per-request-spec-decode-metrics only with speculation, and the
compatibility check refuses it on a vLLM release without the flag (read from the released wheels)."""

from __future__ import annotations

import pytest

from kimi_dflash.config.validate import load_config
from kimi_dflash.launch.prepare import prepare
from kimi_dflash.plan import build_plan
from kimi_dflash.rules.source import VllmSource
from repo_paths import CONFIGS_DIR

FLAG = "--per-request-spec-decode-metrics"


def _plan(name: str, **environ: str):
    config = load_config(CONFIGS_DIR / name, environ=environ)
    return config, build_plan(config, "python", "/cache")


def _judged(name: str, source: VllmSource, **environ: str):
    config = load_config(CONFIGS_DIR / name, environ=environ)
    return prepare(config, {}, source=lambda _plan: source, say=lambda _: None).verdict


@pytest.mark.slow
@pytest.mark.parametrize(("version", "refused"), [("0.28.0", True), ("0.29.0", False)])
def test_compat_check_refuses_the_key_where_vllm_lacks_the_flag(version: str, refused: bool) -> None:
    from kimi_dflash_lab.wheels import source_wheel

    report = _judged("production.env", VllmSource.from_wheel(source_wheel(version)), PER_REQUEST_SPEC_METRICS="summary")
    failures = [f for f in report.failures if FLAG in f.detail]
    assert bool(failures) == refused, [f.detail for f in report.failures]
    if refused:
        assert "PER_REQUEST_SPEC_METRICS" in failures[0].fix and "0.29.0" in failures[0].fix
