"""Issue 33's depth and backend facts read from the released wheels (rules/catalog/depth_schedule.py, aiter_mla.py,
graphs.py), at the lines found by hand in each wheel:
- `SpeculativeConfig.num_speculative_tokens_per_batch_size` first in 0.24.0 (config/speculative.py:162), the
  scheduler's lookup `build_dynamic_sd_schedule_lookup` (v1/spec_decode/dynamic/utils.py:77, unchanged 0.24-0.33);
- V1: `SpecDecodeBaseProposer.propose` sets `self.num_speculative_tokens` from the scheduled k (0.24.0:463,
  0.32.0:532); V2's runner reads `num_spec_tokens_to_schedule` only from 0.32.0 (model_runner.py:2074) and blanks
  drafts past it (2255): 0.24-0.31 on V2 ignore the schedule;
- the data-parallel guard `_maybe_disable_dynamic_sd_for_data_parallel` from 0.26.0 (config/vllm.py:838);
- `AiterMLAHelper.use_gluon_decode` without a gfx950 gate in 0.27.0-0.27.1 (rocm_aiter_mla.py:829), gated from
  0.28.0 (`_gluon_mla_decode_supported`), absent in 0.26.0."""

from __future__ import annotations

import pytest

from kimi_dflash.checkpoint import read_facts
from kimi_dflash.config.validate import load_config
from kimi_dflash.plan import build_plan
from kimi_dflash.rules import engine
from kimi_dflash.rules.catalog.aiter_mla import gluon_gate
from kimi_dflash.rules.catalog.depth_schedule import schedule_facts
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.source import VllmSource
from kimi_dflash_lab.wheels import source_wheel
from repo_paths import CONFIGS_DIR

pytestmark = pytest.mark.slow
RELEASES = ("0.23.0", "0.24.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.31.0", "0.32.0")


@pytest.fixture(scope="module")
def sources() -> dict[str, VllmSource]:
    return {v: VllmSource.from_wheel(source_wheel(v)) for v in RELEASES}


def _plan(config: str, env: dict[str, str] | None = None, **keys: str) -> Deployment:
    loaded = load_config(CONFIGS_DIR / config, environ=keys)
    return Deployment.for_plan(loaded, build_plan(loaded, "python", "/cache"), read_facts(loaded.typed), env)


def test_the_schedule_facts_per_release(sources: dict[str, VllmSource]) -> None:
    facts = {v: schedule_facts(s) for v, s in sources.items()}
    assert facts["0.23.0"] is None
    v24, v25, v26, v31, v32 = (facts[v] for v in ("0.24.0", "0.25.1", "0.26.0", "0.31.0", "0.32.0"))
    assert v24 and v25 and v26 and v31 and v32
    assert str(v24.lookup) == "vllm/v1/spec_decode/dynamic/utils.py:77" and str(v24.v1).endswith("proposer.py:463")
    assert str(sources["0.24.0"].line_of("vllm/config/speculative.py", "num_speculative_tokens_per_batch_size:")) == (
        "vllm/config/speculative.py:162"
    )
    assert v24.v2 is None and v31.v2 is None and str(v32.v2) == "vllm/v1/worker/gpu/model_runner.py:2074"
    assert str(v32.v2_blanks).endswith("model_runner.py:2255") and str(v32.v1).endswith("llm_base_proposer.py:532")
    assert v25.dp_off is None and str(v26.dp_off) == "vllm/config/vllm.py:838"


def test_a_schedule_is_refused_where_the_release_or_its_v2_runner_cannot_take_it(
    sources: dict[str, VllmSource],
) -> None:
    schedule = {"NUM_SPECULATIVE_TOKENS": "3", "NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE": "1-4:3,5-:1"}
    on_v2 = _plan("production-dflash-k26.env", {"VLLM_USE_V2_MODEL_RUNNER": "1"}, **schedule)
    on_v1 = _plan("production-dflash-k26.env", {"VLLM_USE_V2_MODEL_RUNNER": "0"}, **schedule)
    before = engine.judge(on_v1, sources["0.23.0"]).failures
    assert any("num_speculative_tokens_per_batch_size" in f.detail and "0.24.0" in (f.fix or "") for f in before)
    for version in ("0.24.0", "0.31.0"):
        [ignored] = [f for f in engine.judge(on_v2, sources[version]).failures if f.name == "depth by load"]
        assert "the schedule is ignored" in ignored.detail, version
        assert not [f for f in engine.judge(on_v1, sources[version]).failures if f.name == "depth by load"]
    assert not [f for f in engine.judge(on_v2, sources["0.32.0"]).failures if f.name == "depth by load"]
    dp = _plan(
        "production-dflash-k26.env",
        {"VLLM_USE_V2_MODEL_RUNNER": "0"},
        EXTRA_VLLM_ARGS="--data-parallel-size 2",
        **schedule,
    )
    [unguarded] = [f for f in engine.judge(dp, sources["0.25.1"]).failures if f.name == "depth by load"]
    assert "no guard" in unguarded.detail


def test_the_gluon_decode_refuses_kimi_on_gfx942_in_0_27_only(sources: dict[str, VllmSource]) -> None:
    gates = {v: gluon_gate(s) for v, s in sources.items()}
    assert gates["0.26.0"] is None
    assert gates["0.27.0"] is not None and not gates["0.27.0"][1]
    assert str(gates["0.27.0"][0]) == "vllm/v1/attention/backends/mla/rocm_aiter_mla.py:829"
    assert gates["0.28.0"] is not None and gates["0.28.0"][1]
    production = _plan("production.env")
    refused = {
        v
        for v, s in sources.items()
        if any(f.name == "aiter mla gluon on gfx942" for f in engine.judge(production, s).failures)
    }
    assert refused == {"0.27.0", "0.27.1"}
