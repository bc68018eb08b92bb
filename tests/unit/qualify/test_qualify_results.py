"""A qualify run's result files, copied into benchmarks/results/, render in README's Results section: in a table of
their own (config, device, host and workload differ from the demo's), the demo's table unchanged."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from extras import needs_cpu_extra
from kimi_dflash.qualify.bundle import result_name
from kimi_dflash.results_doc import render_block
from repo_paths import REPO_ROOT
from serve_stand_in import kill_servers
from synthetic_server import environ as synthetic_environ

ROOT = REPO_ROOT
RESULTS = ROOT / "benchmarks" / "results"


def _as_gpu_run(source: Path, k: str) -> dict:
    """A demo result dressed as a qualify run of production.env on another box (only the labels change)."""
    document = json.loads(source.read_text("utf-8"))
    document["server_config"]["config"] = "configs/production.env"
    document["server_config"]["values"]["DEVICE"] = "rocm"
    document["server_config"]["overrides"] = {"NUM_SPECULATIVE_TOKENS": k}
    document["tool"]["host"] = "mi300x-box"
    return document


def test_qualify_results_render_in_their_own_table_beside_the_demo(tmp_path: Path) -> None:
    for path in RESULTS.glob("*.json"):
        shutil.copy(path, tmp_path)
    before = render_block(tmp_path)
    for k in ("0", "2"):
        name = result_name("configs/production.env", k, host="mi300x-box")
        (tmp_path / name).write_text(json.dumps(_as_gpu_run(RESULTS / f"demo-cpu-k{k}.json", k)))
    after = render_block(tmp_path)
    heading = "**Measured with this project's `qualify` on mi300x-box (rocm): `production.env`.**"
    assert after.count(heading) == 1 and before.count(heading) == 0
    demo_table = before.split("**Kimi K2.6")[0]
    assert demo_table in after  # the demo's table is untouched
    own = after.split(heading, 1)[1].split("**Kimi K2.6")[0]
    # Its rows are compared with its own k=0 at equal concurrency, not with the demo's.
    assert own.count("| NUM_SPECULATIVE_TOKENS=2 |") == 2 and own.count("x |") == 2
    assert own.count("| NUM_SPECULATIVE_TOKENS=") == 4


# --- the benchmark's newer measures in the report: per-request acceptance, goodput, intervals, reply identity ---

ATTAINMENT = {0: {2: 1.0, 4: 0.5}, 4: {2: 1.0, 4: 0.95}}  # k=0 sustains 2 sessions, k=4 sustains 4
REPEATS = {0: [100.0, 104.0, 96.0], 4: [150.0, 156.0, 144.0]}  # a clear speedup of 1.5x


def _spec_records(k: int) -> list:
    from kimi_dflash.bench import spec_request
    from kimi_dflash.bench.records import RequestRecord

    records = []
    for turn, prompt_tokens, steps in ((1, 40, [4, 4, 2]), (1, 60, [3, 1]), (2, 300, [1, 0, 0])):
        record = RequestRecord(sessions=2, repeat=0, session=0, turn=turn, category=None)
        record.prompt_tokens = prompt_tokens
        hist = [0] * (k + 1)
        for n in steps:
            hist[n] += 1
        record.spec = spec_request.RequestSpec(
            num_spec_tokens=k, num_spec_steps=len(steps), num_accepted_draft_tokens=sum(steps),
            num_draft_tokens=k * len(steps), mean_acceptance_length=0.0, draft_acceptance_rate=0.0,
            acceptance_histogram=hist,
        )  # fmt: skip
        records.append(record)
    return records


def _grid(out: Path) -> None:
    """The demo's k=0 and k=4 results, given the fields a qualify grid benchmark now writes (values chosen here)."""
    from dataclasses import replace

    from kimi_dflash.bench.result import Goodput, RepeatResult, load_result
    from kimi_dflash.bench.spec_summary import spec_per_request

    (out / "grid").mkdir(parents=True)
    for k in (0, 4):
        result = load_result(RESULTS / f"demo-cpu-k{k}.json")
        levels = []
        for level in result.results:
            attainment = ATTAINMENT[k][level.sessions]
            repeats = [RepeatResult(repeat=i, duration_s=10.0, completed=10, failed=0, output_tokens=int(v * 10),
                                    output_tok_s=v) for i, v in enumerate(REPEATS[k])]  # fmt: skip
            goodput = Goodput(slo={"ttft_ms": 1000.0}, requests=20, met=int(20 * attainment), attainment=attainment,
                              request_goodput=1.0, output_goodput=attainment * sum(REPEATS[k]) / 3,
                              violations={"ttft_ms": 20 - int(20 * attainment)})  # fmt: skip
            # k=4's second request of session 1 differs from the reference's: 3 of 4 replies identical.
            hashes = {"0/0/0": "a", "0/0/1": "b", "0/1/0": "c", "0/1/1": "d" if k == 0 else "x"}
            table = spec_per_request(_spec_records(4)) if k else None
            spec = level.spec_decode
            if spec is not None and table is not None:
                spec = replace(spec, accepted_tokens=table.total.accepted_tokens)
            levels.append(replace(level, repeat_results=repeats, goodput=goodput, reply_hashes=hashes,
                                  spec_per_request=table, spec_decode=spec))  # fmt: skip
        replace(result, results=levels).save(out / "grid" / f"NUM_SPECULATIVE_TOKENS-{k}.json")


def _context(out: Path):  # type: ignore[no-untyped-def]
    from kimi_dflash.qualify.plan import build_plan, per_request_setting
    from kimi_dflash.qualify.steps import Context

    values = {"DEVICE": "cpu", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "16"}
    plan = build_plan(values, per_request=per_request_setting(values, (), ("present", "test")))
    return Context(config=ROOT / "configs" / "demo-cpu.env", config_as_given="demo-cpu", values=values,
                   overrides={}, plan=plan, out=out, serve_command=())  # fmt: skip


def test_per_request_and_goodput_steps_compute_what_the_report_shows(tmp_path: Path) -> None:
    from kimi_dflash.qualify import report, steps
    from kimi_dflash.qualify.state import QualifySignature
    from kimi_dflash.runs.state import DONE
    from qualify_fakes import open_state

    _grid(tmp_path)
    ctx = _context(tmp_path)
    per_request, goodput = steps.per_request_step(ctx), steps.goodput_step(ctx)
    assert per_request.status == DONE and "equal the /metrics deltas in 2/2" in per_request.detail
    rows = json.loads((tmp_path / "per_request.json").read_text())["rows"]
    assert [(r["k"], r["sessions"]) for r in rows] == [(4, 2), (4, 4)]
    turns = {g["key"]: g for g in rows[0]["per_turn"]}
    # turn 1: 2 requests, 5 steps, 14 accepted -> tau 1 + 14/5; turn 2: 1 request, 3 steps, 1 accepted.
    assert (
        turns["1"]["requests"] == 2
        and turns["1"]["tau"] == pytest.approx(3.8)
        and turns["2"]["tau"] == pytest.approx(4 / 3, abs=1e-3)
    )
    assert [g["key"] for g in rows[0]["per_prompt_length"]] == ["0-127", "256-511"]

    doc = json.loads((tmp_path / "goodput.json").read_text())
    at = {r["k"]: r for r in doc["at_slo"]}
    assert at[0]["sustained_sessions"] == 2 and at[4]["sustained_sessions"] == 4
    assert at[4]["speedup"] == pytest.approx(0.95 * 150 / 100, abs=1e-3)  # goodput at 4 over the reference's at 2
    matched = doc["matched"]
    assert [(r["sessions"], r["significant"]) for r in matched] == [(2, True), (4, True)]
    assert all(r["low"] < r["speedup"] < r["high"] and r["speedup"] == pytest.approx(1.5) for r in matched)
    assert goodput.status == DONE and "k=4: 1.425x" in goodput.detail

    state = open_state(tmp_path, QualifySignature(), ctx.plan, resume=False)
    for name, outcome in (("per_request", per_request), ("goodput", goodput)):
        state.finish(name, outcome.status, state.begin(name), outcome.detail, outcome.outputs)
    path, _, _ = report.write_report(tmp_path, state, "demo-cpu", plots=False)
    text = path.read_text(encoding="utf-8")
    assert "  - k=4: **6/8** identical (sessions 2, 4); first difference at 2 sessions, reply 0/1/1" in text
    section = text.split("## Per-request acceptance", 1)[1].split("\n## ", 1)[0]
    assert "| 4 | 2 | 3 | 2.88 |" in section  # k, sessions, requests, pooled tau = 1 + 15/8
    assert "| 2 | turn 1 | 2 | 5 | 3.80 |" in section and "| 4 | 256-511 tokens | 1 | 3 | 1.33 |" in section
    assert "yes |" in section  # the per-request sums equal the counters
    speedups = text.split("### Speedup at matched concurrency, with its interval", 1)[1].split("\n## ", 1)[0]
    assert speedups.count("| yes | 3 / 3 |") == 2
    goodput_text = text.split("## Goodput at the SLO", 1)[1].split("\n## ", 1)[0]
    assert "| 0 | 4 | 50.0 % | 10 / 20 |" in goodput_text and "| 4 | 4 | 95.0 % | 142.5 | 1.43x |" in goodput_text


def test_without_the_measures_the_report_says_why(tmp_path: Path) -> None:
    from kimi_dflash.qualify import report
    from kimi_dflash.qualify.plan import build_plan, per_request_setting
    from kimi_dflash.qualify.state import QualifySignature
    from qualify_fakes import open_state

    values = {"DEVICE": "cpu", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "16"}
    plan = build_plan(values, slo="none", per_request=per_request_setting(values, (), ("absent", "vllm 0.28.0")))
    state = open_state(tmp_path, QualifySignature(), plan, resume=False)
    text = report.write_report(tmp_path, state, "demo-cpu", plots=False)[0].read_text(encoding="utf-8")
    assert "*(not measured: the installed vLLM has no --per-request-spec-decode-metrics (added in 0.29.0" in text
    assert "*(not measured: --slo none: no SLO measured)*" in text


STAND_IN_SERVE = """#!/usr/bin/env bash
# Stands in for serve.sh: --wait starts the instrument server (vLLM's endpoints, exact timing, spec-decode counters
# from its chunk pattern) on $PORT and records the config keys it was given; --stop stops it. With graphs on, the
# log first gets the warning vLLM prints when it lowers the cudagraph mode for a verify batch (vllm #49547).
pidfile="$STAND_IN_DIR/server-$PORT.pid"
if [[ " $* " == *" --wait "* ]]; then
  args=("$@"); log="${args[-1]}"
  env | grep -E '^(NUM_SPECULATIVE_TOKENS|SYNTHETIC_ACCEPTANCE_RATES|ENFORCE_EAGER|EXTRA_VLLM_ARGS)=' | sort \\
    > "$STAND_IN_DIR/started"
  : > "$log"
  if [[ "${ENFORCE_EAGER:-}" == false ]]; then
    echo "(EngineCore pid=1) WARNING [compilation.py:1459] CUDAGraphMode.FULL_AND_PIECEWISE is not supported with" \\
      "spec-decode for attention backend ROCM_AITER_MLA (support: SINGLE); setting cudagraph_mode=PIECEWISE" >> "$log"
  fi
  "$KIMI_PYTHON" -m synthetic_server --port "$PORT" --ttft-ms 20 --chunk-interval-ms 5 \\
    --chunk-tokens 3,2,1 --spec-tokens "$NUM_SPECULATIVE_TOKENS" >> "$log" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 200); do grep -q "listening on" "$log" && exit 0; sleep 0.1; done
  exit 1
fi
[[ -f "$pidfile" ]] && kill "$(cat "$pidfile")" && rm -f "$pidfile"
exit 0
"""


def _stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    serve = tmp_path / "serve.sh"
    serve.write_text(STAND_IN_SERVE)
    serve.chmod(0o755)
    monkeypatch.setenv("STAND_IN_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", synthetic_environ()["PYTHONPATH"])  # the instrument server is a tests/ helper
    return serve


def _started(tmp_path: Path) -> dict[str, str]:
    lines = (tmp_path / "started").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def _gpu_context(out: Path, values: dict[str, str], plan, serve: Path):  # type: ignore[no-untyped-def]
    """A GPU plan's context with the stand-in serve.sh, the demo grid's concurrency and a short workload."""
    from dataclasses import replace

    from kimi_dflash.qualify import steps

    workload = ("--max-tokens", "12", "--turns-per-session", "1", "--ignore-eos", "--warmup", "0")
    return steps.Context(
        config=ROOT / "configs" / "production.env", config_as_given="production", values=values, overrides={},
        plan=replace(plan, sessions=(2, 4), bench_args=workload), out=out, serve_command=(str(serve),),
    )  # fmt: skip


@needs_cpu_extra
def test_the_projection_runs_beside_the_grid_and_the_report_labels_it_speed_not_quality(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The projection step on a GPU plan, with serve.sh stood in for by the instrument server (vLLM's synthetic
    sampler cannot run on the CPU build): the candidate is started with one draft per rate and the rates, benchmarked
    at the grid's concurrency into projection/ (never grid/), and compared with the reference at equal concurrency."""

    from kimi_dflash.qualify import report, steps
    from kimi_dflash.qualify.plan import build_plan
    from kimi_dflash.qualify.state import QualifySignature
    from kimi_dflash.runs.state import DONE
    from qualify_fakes import open_state
    from synthetic_server import plan_chunks

    _grid(tmp_path)
    serve = _stand_in(tmp_path, monkeypatch)
    values = {"DEVICE": "rocm", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "16"}
    plan = build_plan(values, slo="none", projection=(0.75, 0.5))
    assert plan.projection == (0.75, 0.5) and next(s for s in plan.steps if s.name == "synthetic").runs
    ctx = _gpu_context(tmp_path, values, plan, serve)
    outcome = steps.synthetic_step(ctx)
    assert outcome.status == DONE, outcome.detail
    assert _started(tmp_path) == {"NUM_SPECULATIVE_TOKENS": "2", "SYNTHETIC_ACCEPTANCE_RATES": "0.75,0.5"}
    assert sorted(p.name for p in (tmp_path / "grid").glob("*.json")) == [
        "NUM_SPECULATIVE_TOKENS-0.json",
        "NUM_SPECULATIVE_TOKENS-4.json",
    ]
    document = json.loads((tmp_path / "projection.json").read_text())
    assert document["k"] == 2 and document["rates"] == [0.75, 0.5] and "not of quality" in document["what"]
    rows = {r["sessions"]: r for r in document["rows"]}
    steps_after_first = plan_chunks(12, (3, 2, 1))[1:]
    counted_tau = 1 + sum(size - 1 for size in steps_after_first) / len(steps_after_first)
    assert set(rows) == {2, 4}
    reference = {lv.sessions: lv.output_tok_s for lv in steps.grid_results(ctx)[0][1].results}
    for sessions, row in rows.items():
        assert row["tau_expected"] == pytest.approx(2.25)
        # the server's own count, whatever was asked: the stand-in streams chunks of 3, 2, 1 tokens, and each chunk
        # after the first is one verify step that accepted its size - 1 drafts
        assert row["tau_measured"] == pytest.approx(counted_tau)
        assert row["speedup"] == pytest.approx(row["output_tok_s"] / reference[sessions], rel=1e-2)
        assert row["candidate_tok_s"] is not None and row["candidate_speedup"] is not None

    state = open_state(tmp_path, QualifySignature(), ctx.plan, resume=False)
    state.finish("synthetic", outcome.status, state.begin("synthetic"), outcome.detail, outcome.outputs)
    text = report.write_report(tmp_path, state, "production", plots=False)[0].read_text(encoding="utf-8")
    section = text.split("## Projection: what a better drafter would give on this box", 1)[1].split("\n## ", 1)[0]
    assert "**A projection of speed, not of quality.**" in section and "0.75, 0.5" in section
    assert "| 2 |" in section and f"| 2.25 / {counted_tau:.2f} |" in section


def test_without_rates_or_on_cpu_the_report_says_why_there_is_no_projection(tmp_path: Path) -> None:
    from kimi_dflash.qualify import report
    from kimi_dflash.qualify.plan import build_plan
    from kimi_dflash.qualify.state import QualifySignature
    from qualify_fakes import open_state

    for device, why in (("rocm", "not asked for: --project-acceptance RATES"), ("cpu", "refused on the CPU build")):
        values = {"DEVICE": device, "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "2", "MAX_NUM_SEQS": "8"}
        plan = build_plan(values, projection=(0.8, 0.6) if device == "cpu" else ())
        assert plan.projection == ()
        out = tmp_path / device
        state = open_state(out, QualifySignature(), plan, resume=False)
        text = report.write_report(out, state, "x", plots=False)[0].read_text(encoding="utf-8")
        assert f"*(not measured: {why}" in text


@needs_cpu_extra
def test_the_graph_mode_candidate_runs_apart_from_the_grid_and_reports_a_lowered_graph_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graphs step on a GPU plan with the stand-in server: the candidate is started with graphs on and aligned
    capture sizes, its outputs compared with the eager reference's, benchmarked into graphs/ (the grid is keyed by k
    and this point shares the candidate's), and the cudagraph mode vLLM lowered after start-up is reported."""
    from dataclasses import asdict

    from kimi_dflash.qualify import report, steps
    from kimi_dflash.qualify.graphs import graph_candidate
    from kimi_dflash.qualify.plan import build_plan
    from kimi_dflash.qualify.state import QualifySignature
    from kimi_dflash.runs.state import DONE
    from kimi_dflash.validate.client import Completion
    from qualify_fakes import open_state

    _grid(tmp_path)
    serve = _stand_in(tmp_path, monkeypatch)
    values = {"DEVICE": "rocm", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "4"}
    plan = build_plan(values, slo="none", graphs=graph_candidate(values, 4, "gpu", lambda _: (True, "")))
    assert next(s for s in plan.steps if s.name == "graphs").runs
    # Outputs stored by the reference step and by this server (the instrument server returns no token ids).
    outputs = {"model": "synthetic", "max_tokens": 4, "prompts": ["a", "b"],
               "completions": [asdict(Completion("x", [1, 2, 3, 4], 4, 3, "length"))] * 2}  # fmt: skip
    (tmp_path / "lossless").mkdir()
    for name in ("reference.json", "graphs.json"):
        (tmp_path / "lossless" / name).write_text(json.dumps(outputs))
    ctx = _gpu_context(tmp_path, values, plan, serve)
    outcome = steps.graphs_step(ctx)
    assert outcome.status == DONE, outcome.detail
    started = _started(tmp_path)
    assert started["ENFORCE_EAGER"] == "false" and started["NUM_SPECULATIVE_TOKENS"] == "4"
    assert '"cudagraph_capture_sizes": [5, 10, 20]' in started["EXTRA_VLLM_ARGS"]  # multiples of 1 + k = 5
    assert sorted(p.name for p in (tmp_path / "grid").glob("*.json")) == [
        "NUM_SPECULATIVE_TOKENS-0.json",
        "NUM_SPECULATIVE_TOKENS-4.json",
    ]
    document = json.loads((tmp_path / "graphs.json").read_text())
    assert document["cudagraph_mode"] == "PIECEWISE" and document["downgraded"]
    assert document["identity"]["identical"] == document["identity"]["prompts"] == 2
    rows = {r["sessions"]: r for r in document["rows"]}
    eager = {lv.sessions: lv.output_tok_s for lv in steps.grid_results(ctx)[1][1].results}
    assert set(rows) == {2, 4}
    for sessions, row in rows.items():
        assert row["speedup_vs_eager"] == pytest.approx(row["output_tok_s"] / eager[sessions], rel=1e-2)
    assert "PIECEWISE (lowered after start-up: vllm #49547)" in outcome.detail

    state = open_state(tmp_path, QualifySignature(), ctx.plan, resume=False)
    state.finish("graphs", outcome.status, state.begin("graphs"), outcome.detail, outcome.outputs)
    text = report.write_report(tmp_path, state, "production", plots=False)[0].read_text(encoding="utf-8")
    section = text.split("## Graph-mode candidate", 1)[1].split("\n## ", 1)[0]
    assert "**PIECEWISE, lowered by vLLM after start-up**" in section and "**2/2**" in section
    assert "`ENFORCE_EAGER=false`" in section and "| 4 |" in section


FP8_STAND_IN = """#!/usr/bin/env bash
# serve.sh for the FP8 step: --wait notes the KV keys it was given and starts the instrument server, whose log says
# its KV capacity as vLLM's does; --stop notes the port and stops it.
pidfile="$STAND_IN_DIR/server-$PORT.pid"
if [[ " $* " == *" --wait "* ]]; then
  args=("$@"); log="${args[-1]}"
  echo "$PORT KV_CACHE_DTYPE=$KV_CACHE_DTYPE KV_SCALE_MODE=$KV_SCALE_MODE SPECULATIVE_METHOD=$SPECULATIVE_METHOD" \\
    >> "$STAND_IN_DIR/started"
  echo "INFO [kv_cache_utils.py:1] GPU KV cache size: 1,000 tokens" > "$log"
  "$KIMI_PYTHON" -m synthetic_server --port "$PORT" --ttft-ms 1 --chunk-interval-ms 1 >> "$log" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 300); do grep -q "listening on" "$log" && exit 0; sleep 0.1; done
  exit 1
fi
echo "$PORT" >> "$STAND_IN_DIR/stops"
[[ -f "$pidfile" ]] && kill "$(cat "$pidfile")" && rm -f "$pidfile"
exit 0
"""


@needs_cpu_extra
def test_the_fp8_step_serves_the_bf16_kv_server_through_serve_sh_and_writes_a_typed_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The BF16-KV server is started like every other server of the run (launch.serve_sh: serve.sh --wait with
    the config keys, running.json naming it, serve.sh --stop), and the verdict is a typed document."""
    from kimi_dflash.fp8.validate import Fp8Summary
    from kimi_dflash.qualify import steps
    from kimi_dflash.qualify.lossless import GreedyOutputs
    from kimi_dflash.qualify.plan import build_plan
    from kimi_dflash.runs.state import DONE
    from kimi_dflash.validate.client import Completion
    from kimi_dflash.validate.engine import math_questions

    serve = tmp_path / "serve.sh"
    serve.write_text(FP8_STAND_IN)
    serve.chmod(0o755)
    monkeypatch.setenv("STAND_IN_DIR", str(tmp_path))
    monkeypatch.setenv("KIMI_PYTHON", sys.executable)
    monkeypatch.setenv("PYTHONPATH", synthetic_environ()["PYTHONPATH"])
    values = {"DEVICE": "cpu", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "4",
              "KV_CACHE_DTYPE": "fp8"}  # fmt: skip
    plan = build_plan(values, slo="none")
    ctx = steps.Context(config=ROOT / "configs" / "demo-cpu.env", config_as_given="demo-cpu", values=values,
                        overrides={}, plan=plan, out=tmp_path / "out", serve_command=(str(serve),))  # fmt: skip
    # What the reference step left: the FP8 reference's greedy outputs and math answers, and its server's log.
    _, questions = math_questions()
    done = [Completion("The answer is 7.", [1, 2, 3], 3, 3, "length")]
    GreedyOutputs(model="m", max_tokens=8, prompts=["a"], completions=done).save(ctx.lossless_dir / "reference.json")
    GreedyOutputs(model="m", max_tokens=8, prompts=questions, completions=done * len(questions)).save(
        ctx.lossless_dir / "reference-math.json"
    )
    fp8_log = ctx.grid_dir / "logs" / "NUM_SPECULATIVE_TOKENS-0.server.log"
    fp8_log.parent.mkdir(parents=True)
    fp8_log.write_text("INFO GPU KV cache size: 2,100 tokens\n")
    try:
        outcome = steps.fp8_step(ctx)
    finally:
        kill_servers(tmp_path)
    assert outcome.status == DONE and outcome.outputs.verdict in ("PASS", "WARN", "FAIL"), outcome.detail
    [started] = (tmp_path / "started").read_text().splitlines()
    port, *keys = started.split()
    assert keys == ["KV_CACHE_DTYPE=auto", "KV_SCALE_MODE=off", "SPECULATIVE_METHOD=none"]
    assert (tmp_path / "stops").read_text().split() == [port] and not (ctx.grid_dir / "running.json").exists()
    summary = Fp8Summary.load(ctx.out / "fp8.json")
    assert (summary.kv_capacity_bf16, summary.kv_capacity_fp8) == (1000, 2100)
    assert summary.verdict == outcome.outputs.verdict


def test_the_report_sets_the_recipe_figures_shipped_in_the_package_beside_the_run(tmp_path: Path) -> None:
    """No checkout needed: the recipe's published figures come with the package (an install has no benchmarks/)."""
    from kimi_dflash.qualify import report
    from kimi_dflash.qualify.plan import build_plan
    from kimi_dflash.qualify.state import QualifySignature
    from qualify_fakes import open_state

    _grid(tmp_path)
    values = {"DEVICE": "cpu", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "16"}
    state = open_state(tmp_path, QualifySignature(), build_plan(values), resume=False)
    text = report.write_report(tmp_path, state, "demo-cpu", plots=False)[0].read_text(encoding="utf-8")
    section = text.split("## The recipe's published MI300X figures beside this run", 1)[1].split("\n## ", 1)[0]
    assert "**not measured by this project**" in section and "| `production.env` | BF16 | 2 | 32 | 507.6 |" in section


def test_advisor_step_with_one_speculative_k_recommends_among_the_measured_k(tmp_path: Path) -> None:
    """A budget-trimmed grid (k=0 and k=4 only): the model cannot fit a step-time slope, so the advisor step says so
    and recommends, per concurrency, the measured k with the highest aggregate tok/s."""
    from kimi_dflash.advisor.model import measurements
    from kimi_dflash.qualify import steps
    from kimi_dflash.qualify.documents import Advisor
    from kimi_dflash.runs.state import DONE

    _grid(tmp_path)
    ctx = _context(tmp_path)
    outcome = steps.advisor_step(ctx)
    assert (
        outcome.status == DONE and "(measured k only: at 2 sessions the runs have only k=4 (k >= 1)" in outcome.detail
    )
    advisor = Advisor.load(tmp_path / "advisor.json")
    assert advisor.per_position == [] and advisor.lines[0].startswith("advisor model not fitted: at 2 sessions")
    runs = measurements(steps.grid_results(ctx))
    for sessions, rec in advisor.recommendations.items():
        fastest = max((m for m in runs if m.sessions == int(sessions)), key=lambda m: m.output_tok_s)
        assert (rec.k, rec.output_tok_s, rec.measured) == (fastest.k, round(fastest.output_tok_s, 2), True)
    assert (
        list(advisor.recommendations) == sorted(advisor.recommendations, key=int) and len(advisor.recommendations) > 1
    )
