"""The steps of a qualification, one function each: ``(Context) -> Outcome``. Each reads what earlier steps left
on disk (never their in-memory state), so any step can be rerun alone after a kill.

Two steps run on a GPU only and keep their results out of grid/ (which is keyed by k): the graph-mode candidate
(graphs/: it shares the candidate's k) and the synthetic-acceptance projection (projection/: no verdict, acceptance
table or advisor fit may ever read a projected figure).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kimi_dflash.core.atomic_write import write_json_atomic, write_text_atomic
from kimi_dflash.qualify import lossless
from kimi_dflash.qualify.environment import capture
from kimi_dflash.qualify.plan import RATES_KEY, SPEC_TOKENS, QualifyPlan
from kimi_dflash.qualify.state import DONE, FAILED, SKIPPED
from kimi_dflash.sweep import state as sweep_state
from kimi_dflash.sweep.grid import Point
from kimi_dflash.sweep.runner import PointRunner, Progress, SweepPlan, free_port, run_sweep

# Config keys that make the candidate serve another model (and so another tokenizer).
MODEL_KEYS = ("MODEL_DIR", "MODEL_REPO", "FABRICATE_DEMO_MODELS")


@dataclass(frozen=True)
class Outcome:
    status: str  # DONE, FAILED or SKIPPED
    detail: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    config: Path  # resolved
    config_as_given: str
    values: dict[str, str]  # the config's values as strings (API_KEY left out)
    overrides: dict[str, str]  # config keys this run took from the environment
    plan: QualifyPlan
    out: Path
    serve_command: tuple[str, ...]
    candidate_env: tuple[tuple[str, str], ...] = ()  # test aid: make the candidate differ beyond speculation
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)
    # Lists files in the run's manifest (RunState.record): the archive packs exactly those. A file is listed
    # before it is written, so one a failing step leaves behind (a server log) is packed too.
    record: Callable[..., None] = lambda *paths: None

    @property
    def grid_dir(self) -> Path:
        return self.out / "grid"

    @property
    def lossless_dir(self) -> Path:
        return self.out / "lossless"

    @property
    def projection_dir(self) -> Path:
        return self.out / "projection"

    def write_json(self, path: Path, document: Any) -> None:
        self.record(path)
        write_json_atomic(path, document)

    def write_text(self, path: Path, text: str) -> None:
        self.record(path)
        write_text_atomic(path, text)

    def record_points(self, out: Path, points: list[Point]) -> None:
        """The files the sweep machinery writes for ``points`` in ``out`` (results, failures, logs)."""
        for point in points:
            self.record(*sweep_state.point_files(out, point))

    def point(self, k: int) -> Point:
        extra = self.candidate_env if k == self.plan.spec_tokens else ()
        return Point(((SPEC_TOKENS, str(k)), *extra))

    def sweep_plan(self, ks: tuple[int, ...] | None = None) -> SweepPlan:
        return SweepPlan(
            config=self.config,
            serve_command=self.serve_command,
            points=[self.point(k) for k in (ks if ks is not None else self.plan.k_values)],
            sessions=self.plan.sessions,
            bench_args=list(self.plan.bench_args),
            out=self.grid_dir,
            config_as_given=self.config_as_given,
            server_env=self.plan.server_env,
        )


# ---------------------------------------------------------------------------------------------- environment


def _launch_plan(ctx: Context) -> dict[str, Any] | None:
    from kimi_dflash.bench.report import redact_argv
    from kimi_dflash.config.problems import ConfigError
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.launch.prepare import local_plan, resolve_demo_models

    try:
        config = resolve_demo_models(load_config(ctx.config, environ=os.environ), create=False, say=lambda _: None)
        plan = local_plan(config)
    except (ConfigError, OSError) as exc:
        return {"error": str(exc)}
    env = {k: ("<redacted>" if k in plan.secret_env else v) for k, v in sorted(plan.env.items())}
    return {"argv": redact_argv(list(plan.argv)), "env": env}


def environment_step(ctx: Context) -> Outcome:
    document = capture(ctx.config_as_given, ctx.values, ctx.overrides, ctx.plan.to_json(), _launch_plan(ctx))
    ctx.write_json(ctx.out / "environment.json", document)
    accelerators = ", ".join(document["accelerators"]) or "no accelerator tool found"
    versions = ", ".join(f"{k} {v}" for k, v in document["versions"].items() if v)
    return Outcome(DONE, f"{document['host']['hostname']}: {accelerators}; {versions}", {"file": "environment.json"})


# ------------------------------------------------------------------------------------------------ preflight


def preflight_step(ctx: Context) -> Outcome:
    """Preflight as `serve.sh --preflight` runs it: the machine checks and the compatibility check of the installed
    vLLM with the runtime-trap rules. Any FAIL stops the run before a server starts."""
    from kimi_dflash.config.problems import ConfigError
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.launch import hooks
    from kimi_dflash.launch.prepare import local_plan, resolve_demo_models

    lines: list[str] = []
    try:
        # The port is picked per server by qualify: check one that is free, not the config's.
        config = load_config(ctx.config, environ={**os.environ, "PORT": str(free_port())})
        config = resolve_demo_models(config, create=True, say=lines.append)
        ok = hooks.preflight(config, local_plan(config), fix_numa=False, say=lines.append)
    except ConfigError as error:
        lines.extend(p.render() for p in error.problems)
        ok = False
    text = "\n".join(lines)
    ctx.write_text(ctx.out / "preflight.txt", text + "\n")
    failing = [line for line in text.splitlines() if "FAIL" in line]
    if not ok:
        return Outcome(
            FAILED,
            "preflight failed: " + ("; ".join(failing[:5]) or "see preflight.txt"),
            {"file": "preflight.txt", "failing": failing},
        )
    return Outcome(DONE, "preflight passed (see preflight.txt)", {"file": "preflight.txt"})


# ------------------------------------------------------------------------------- reference and candidate


def _serve_point(ctx: Context, k: int, on_ready: Callable[[str], None] | None) -> bool:
    """Start the grid point for ``k``, run ``on_ready`` on it (None: nothing needs the server but the benchmark),
    benchmark, stop. A point already benchmarked is started again only when ``on_ready`` needs it."""
    return _serve(ctx, ctx.sweep_plan(), ctx.point(k), on_ready)


def _serve(ctx: Context, plan: SweepPlan, point: Point, on_ready: Callable[[str], None] | None) -> bool:
    ctx.record_points(plan.out, [point])
    runner = PointRunner(plan, out=sys.stderr)
    runner.stop_leftover()
    if on_ready is None and sweep_state.finished_result(plan.out, point) is not None:
        return True
    plan.out.mkdir(parents=True, exist_ok=True)
    return runner.run(point, Progress(1, 1, sys.stderr), 1, on_ready=on_ready)


def _guarded(errors: list[str], action: Callable[[str], None]) -> Callable[[str], None]:
    """A hook whose failure is recorded while the server still gets benchmarked and stopped."""

    def hook(url: str) -> None:
        try:
            action(url)
        except Exception as exc:  # noqa: BLE001 - recorded as the step's failure; the point still runs
            errors.append(f"{type(exc).__name__}: {exc}")

    return hook


def _shipped_outputs(ctx: Context, path: Path, url: str) -> None:
    """The server's greedy outputs for the shipped prompts, saved once (a rerun keeps them)."""
    if not path.is_file():
        box = ctx.plan.box
        prompts = lossless.shipped_prompts(box.lossless_prompts)
        ctx.write_json(path, lossless.generate(url, prompts, box.lossless_max_tokens))


def _against_reference(ctx: Context, own: Path, verdict: Path, url: str, same_tokenizer: bool, what: str) -> None:
    """This server's outputs compared token by token with the stored reference's -> ``verdict``."""
    _shipped_outputs(ctx, own, url)
    reference = ctx.lossless_dir / "reference.json"
    if not reference.is_file():
        raise FileNotFoundError(f"no reference outputs (the reference step failed): {what} not judged")
    ctx.write_json(verdict, lossless.compare(lossless.load(reference), lossless.load(own), url, same_tokenizer))


def reference_step(ctx: Context) -> Outcome:
    """The config without speculation: its greedy outputs (and math answers when FP8 KV needs them), then k=0."""
    ref_path, math_path = ctx.lossless_dir / "reference.json", ctx.lossless_dir / "reference-math.json"
    errors: list[str] = []

    def outputs(url: str) -> None:
        _shipped_outputs(ctx, ref_path, url)
        if ctx.plan.fp8_kv and not math_path.is_file():
            ctx.write_json(math_path, lossless.math_outputs(url, 256))

    done = ref_path.is_file() and (math_path.is_file() or not ctx.plan.fp8_kv)
    benchmarked = _serve_point(ctx, 0, None if done else _guarded(errors, outputs))
    return _point_outcome(ctx, 0, benchmarked, errors, {"outputs": str(ref_path.relative_to(ctx.out))})


def candidate_step(ctx: Context) -> Outcome:
    """The config as given: its greedy outputs compared token by token with the reference's, then its benchmark."""
    k = ctx.plan.spec_tokens
    cand_path, verdict_path = ctx.lossless_dir / "candidate.json", ctx.lossless_dir / "verdict.json"
    same_tokenizer = not any(key in MODEL_KEYS for key, _ in ctx.candidate_env)
    errors: list[str] = []

    def outputs(url: str) -> None:
        _against_reference(ctx, cand_path, verdict_path, url, same_tokenizer, "losslessness")

    benchmarked = _serve_point(ctx, k, None if verdict_path.is_file() else _guarded(errors, outputs))
    found: dict[str, Any] = {"verdict_file": str(verdict_path.relative_to(ctx.out))}
    if verdict_path.is_file():
        found["lossless"] = lossless.load(verdict_path)["verdict"]
    return _point_outcome(ctx, k, benchmarked, errors, found)


def _point_outcome(ctx: Context, k: int, benchmarked: bool, errors: list[str], found: dict[str, Any]) -> Outcome:
    point = ctx.point(k)
    found["result"] = str(sweep_state.result_path(ctx.grid_dir, point).relative_to(ctx.out))
    problems = list(errors)
    if not benchmarked:
        failure = next((f for f in sweep_state.read_failures(ctx.grid_dir) if f.point == point.name), None)
        problems.append(f"{failure.stage}: {failure.detail}" if failure else "the point did not finish")
    if problems:
        return Outcome(FAILED, "; ".join(problems), found)
    return Outcome(DONE, f"{point.label}: outputs and benchmark done", found)


# ---------------------------------------------------------------------------------------------------- fp8


def fp8_step(ctx: Context) -> Outcome:
    """FP8 KV against BF16 KV (kvscale/validate.py's thresholds): the FP8 reference's outputs and math answers
    (from the reference step) against a BF16-KV server's, started here, and the KV capacity of both."""
    from kimi_dflash.fp8.validate import Thresholds, kv_capacity_from_log, verdict_lines
    from kimi_dflash.launch.local import ServerStartError, start_local_server
    from kimi_dflash.validate.engine import compare_tokens, summarize_agreement

    ref_path, math_path = ctx.lossless_dir / "reference.json", ctx.lossless_dir / "reference-math.json"
    if not (ref_path.is_file() and math_path.is_file()):
        return Outcome(FAILED, "no FP8 reference outputs (the reference step failed)")
    log = ctx.out / "logs" / "bf16-kv.server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    ctx.record(log)
    overrides = {
        **{k: v for k, v in os.environ.items() if k in ctx.overrides},
        "KV_CACHE_DTYPE": "auto",
        "KV_SCALE_MODE": "off",
        "SPECULATIVE_METHOD": "none",
        "PORT": str(free_port()),
    }
    try:
        server = start_local_server(ctx.config, log, overrides=overrides, say=ctx.say)
    except ServerStartError as exc:
        return Outcome(FAILED, f"the BF16-KV server did not start: {str(exc).splitlines()[0]}")
    try:
        fp8_doc = lossless.load(ref_path)
        bf16_doc = lossless.generate(server.base_url, fp8_doc["prompts"], fp8_doc["max_tokens"])
        bf16_math = lossless.math_outputs(server.base_url, 256)
    finally:
        server.stop()
    pairs = [
        compare_tokens(a["token_ids"] or [], b["token_ids"] or [])
        for a, b in zip(bf16_doc["completions"], fp8_doc["completions"])
    ]
    math_bf16, math_fp8 = lossless.math_accuracy(bf16_math, lossless.load(math_path))
    fp8_log = sweep_state.server_log(ctx.grid_dir, ctx.point(0))
    capacity = tuple(
        kv_capacity_from_log(p.read_text(errors="replace")) if p.is_file() else None for p in (log, fp8_log)
    )
    status, reasons = verdict_lines(summarize_agreement(pairs), math_bf16, math_fp8, capacity, Thresholds())  # type: ignore[arg-type]
    document = {
        "verdict": status,
        "reasons": reasons,
        "math_bf16": math_bf16,
        "math_fp8": math_fp8,
        "kv_capacity_bf16": capacity[0],
        "kv_capacity_fp8": capacity[1],
    }
    ctx.write_json(ctx.out / "fp8.json", document)
    return Outcome(DONE, f"FP8 KV {status}", {"fp8": status, "file": "fp8.json"})


# --------------------------------------------------------------------------------------------------- grid


def grid_step(ctx: Context) -> Outcome:
    """Every remaining point of the k x concurrency grid (the sweep machinery: resumable, failures recorded)."""
    plan = ctx.sweep_plan()
    plan.out.mkdir(parents=True, exist_ok=True)
    ctx.record_points(plan.out, plan.points)
    skipped, ran, failed = run_sweep(plan)
    finished = [p.name for p in plan.points if sweep_state.finished_result(plan.out, p) is not None]
    outputs = {"points": [p.name for p in plan.points], "finished": finished}
    detail = f"{ran} point(s) run now, {skipped} already finished, {failed} failed"
    if failed:
        failures = [f"{f.point} ({f.stage}): {f.detail}" for f in sweep_state.read_failures(plan.out)]
        return Outcome(FAILED, f"{detail}: {'; '.join(failures)}", outputs)
    return Outcome(DONE, detail, outputs)


def graphs_step(ctx: Context) -> Outcome:
    """The candidate with graphs on (the plan's graph keys): its greedy outputs against the eager reference's, then
    its benchmark at the grid's concurrency -> graphs/, graphs.json with the cudagraph mode the server ended with.

    Token identity here is evidence, not a verdict: graphs run the target's own forward through other kernels and
    batch shapes, so a difference can come from the target's numerics, not from speculation (the lossless verdict is
    the eager candidate's). Results stay out of grid/: the grid is keyed by k, and this point shares the candidate's."""
    from kimi_dflash.qualify.graphs import graph_mode_from_log
    from kimi_dflash.qualify.measures import graph_rows

    k = ctx.plan.spec_tokens
    point = Point(((SPEC_TOKENS, str(k)), *ctx.plan.graph_overrides))
    plan = replace(ctx.sweep_plan(), points=[point], out=ctx.out / "graphs")
    own_path, identity_path = ctx.lossless_dir / "graphs.json", ctx.lossless_dir / "graphs-identity.json"
    errors: list[str] = []

    def outputs(url: str) -> None:
        _against_reference(ctx, own_path, identity_path, url, True, "token identity")

    benchmarked = _serve(ctx, plan, point, None if identity_path.is_file() else _guarded(errors, outputs))
    log = sweep_state.server_log(plan.out, point)
    mode = graph_mode_from_log(log.read_text(encoding="utf-8", errors="replace") if log.is_file() else "")
    result = sweep_state.finished_result(plan.out, point)
    identity = lossless.load(identity_path) if identity_path.is_file() else None
    document = {
        "overrides": [list(kv) for kv in ctx.plan.graph_overrides],
        "cudagraph_mode": mode.mode,
        "downgraded": mode.downgraded,
        "mode_evidence": mode.line,
        "identity": None if identity is None else identity["agreement"],
        "rows": [] if result is None else graph_rows(grid_results(ctx), result, k),
        "result": str(sweep_state.result_path(plan.out, point).relative_to(ctx.out)),
    }
    ctx.write_json(ctx.out / "graphs.json", document)
    if not benchmarked:
        failure = next((f for f in sweep_state.read_failures(plan.out) if f.point == point.name), None)
        errors.append(f"{failure.stage}: {failure.detail}" if failure else "the point did not finish")
    if errors:
        return Outcome(FAILED, "; ".join(errors), {"file": "graphs.json"})
    speedups = ", ".join(
        f"{r['sessions']}: {r['speedup_vs_eager']}x" for r in document["rows"] if r["speedup_vs_eager"] is not None
    )
    downgrade = " (lowered after start-up: vllm #49547)" if mode.downgraded else ""
    return Outcome(
        DONE,
        f"cudagraph_mode {mode.mode or 'not in the log'}{downgrade}; vs the eager candidate at sessions {speedups}",
        {"file": "graphs.json"},
    )


# ----------------------------------------------------------------------------------------------- analysis


def grid_results(ctx: Context) -> list[tuple[str, Any]]:
    return [(path.stem, result) for path, result in sweep_state.finished_results(ctx.grid_dir)]


def acceptance_step(ctx: Context) -> Outcome:
    """Acceptance by draft position at every speculative point and concurrency (Prometheus counter deltas)."""
    rows = []
    for name, result in grid_results(ctx):
        k = int(result.server_config.overrides.get(SPEC_TOKENS, "0")) if result.server_config else 0
        for level in result.results:
            spec = level.spec_decode
            if k and spec is not None and spec.per_position:
                rows.append(
                    {
                        "point": name,
                        "k": k,
                        "sessions": level.sessions,
                        "per_position": spec.per_position,
                        "acceptance_rate": spec.acceptance_rate,
                        "acceptance_length": spec.acceptance_length,
                        "drafts": spec.drafts,
                    }
                )
    if not rows:
        return Outcome(FAILED, "no speculative grid point reported acceptance counters")
    ctx.write_json(ctx.out / "acceptance.json", {"rows": rows})
    return Outcome(DONE, f"{len(rows)} (point, concurrency) rows", {"file": "acceptance.json", "rows": len(rows)})


def per_request_step(ctx: Context) -> Outcome:
    """Per-request acceptance (vLLM's --per-request-spec-decode-metrics, read by the benchmark from each reply):
    per speculative point and concurrency, by turn, prompt length and category -> per_request.json."""
    from kimi_dflash.qualify.measures import per_request_rows

    rows = per_request_rows(grid_results(ctx))
    if not rows:
        return Outcome(
            FAILED,
            "no speculative grid point's replies carried metrics.speculative_decoding (was the server started "
            f"with {' '.join(f'{k}={v}' for k, v in ctx.plan.server_env) or 'PER_REQUEST_SPEC_METRICS'}?)",
        )
    ctx.write_json(ctx.out / "per_request.json", {"rows": rows})
    equal = [r for r in rows if r["counter_accepted"] is not None]
    same = sum(r["total"]["accepted"] == r["counter_accepted"] for r in equal)
    summary = ", ".join(
        f"k={r['k']}@{r['sessions']}: tau {r['total']['tau']}" for r in rows if r["total"]["tau"] is not None
    )
    detail = f"{len(rows)} (point, concurrency) rows; per-request sums equal the /metrics deltas in {same}/{len(equal)}"
    return Outcome(DONE, f"{detail}; {summary}"[:400], {"file": "per_request.json", "rows": len(rows)})


def goodput_step(ctx: Context) -> Outcome:
    """Goodput at the plan's SLO per point and concurrency, the speedup at the SLO and the speedup at matched
    concurrency with its interval over repeats -> goodput.json."""
    from kimi_dflash.bench.compare_extras import DEFAULT_ATTAINMENT
    from kimi_dflash.bench.goodput import describe, parse_slo
    from kimi_dflash.qualify import measures

    results = grid_results(ctx)
    rows = measures.goodput_rows(results)
    if not rows:
        return Outcome(FAILED, "no grid result carries goodput (were the benchmarks run with --slo?)")
    document = {
        "slo": parse_slo(ctx.plan.slo),
        "slo_text": describe(parse_slo(ctx.plan.slo)),
        "slo_source": ctx.plan.box.slo_source if ctx.plan.slo == ctx.plan.box.slo else "given with --slo",
        "threshold": DEFAULT_ATTAINMENT,
        "rows": rows,
        "at_slo": measures.at_slo(results, DEFAULT_ATTAINMENT),
        "matched": measures.matched(results),
    }
    ctx.write_json(ctx.out / "goodput.json", document)
    at = ", ".join(f"k={r['k']}: {r['speedup']}x" for r in document["at_slo"] if r["speedup"] is not None)
    detail = f"{len(rows)} (point, concurrency) rows; speedup at the SLO: {at or 'none (a side sustains no level)'}"
    return Outcome(DONE, detail, {"file": "goodput.json", "rows": len(rows)})


def synthetic_step(ctx: Context) -> Outcome:
    """The projection: the candidate served with vLLM's synthetic acceptance sampler at the rates asked for
    (SYNTHETIC_ACCEPTANCE_RATES, k = one draft per rate), benchmarked at the grid's concurrency like any grid point
    (the sweep machinery: resumable, failures recorded) -> projection/, projection.json. Speed only: the sampler
    does not check drafts against the target, so nothing here says anything about the outputs."""
    from kimi_dflash.config.acceptance_rates import format_rate
    from kimi_dflash.qualify.measures import projection_rows

    step = next(s for s in ctx.plan.steps if s.name == "synthetic")
    if not step.runs:
        return Outcome(SKIPPED, step.reason)
    rates = ctx.plan.projection
    point = Point(((SPEC_TOKENS, str(len(rates))), (RATES_KEY, ",".join(map(format_rate, rates)))))
    plan = replace(ctx.sweep_plan(), points=[point], out=ctx.projection_dir)
    plan.out.mkdir(parents=True, exist_ok=True)
    ctx.record_points(plan.out, plan.points)
    run_sweep(plan)
    result = sweep_state.finished_result(plan.out, point)
    if result is None:
        failures = [f"{f.stage}: {f.detail}" for f in sweep_state.read_failures(plan.out) if f.point == point.name]
        return Outcome(FAILED, "; ".join(failures) or "the projection point did not finish", {"dir": "projection"})
    rows = projection_rows(grid_results(ctx), result, rates, ctx.plan.spec_tokens)
    document = {
        "what": "a projection of speed, not of quality: vLLM's synthetic rejection sampler accepted drafts at the "
        "given per-position rates without checking them against the target",
        "rates": list(rates),
        "k": len(rates),
        "rows": rows,
        "result": str(sweep_state.result_path(plan.out, point).relative_to(ctx.out)),
    }
    ctx.write_json(ctx.out / "projection.json", document)
    summary = ", ".join(f"{r['sessions']} sessions: {r['speedup']}x" for r in rows if r["speedup"] is not None)
    return Outcome(
        DONE,
        f"k={len(rates)} at {','.join(map(format_rate, rates))}: {summary or 'no reference level to compare'}",
        {"file": "projection.json", "rows": len(rows)},
    )


def advisor_step(ctx: Context) -> Outcome:
    """The advisor's k per measured concurrency (measured where measured, predicted elsewhere)."""
    from kimi_dflash.advisor.cli import render
    from kimi_dflash.advisor.model import measurements, predict, recommend
    from kimi_dflash.core.errors import UserError

    try:
        runs = measurements(grid_results(ctx))
    except UserError as exc:
        return Outcome(FAILED, str(exc))
    try:
        p, predictions = predict(runs)
    except UserError as exc:
        # A budget-trimmed grid may hold one k >= 1: the model cannot fit a step-time slope from it, so no other k
        # is predicted; the measured points still say which of those measured was faster at each concurrency.
        return _measured_only(ctx, runs, str(exc))
    best = recommend(predictions)
    recommendations = {
        str(sessions): {
            "k": pred.k,
            "output_tok_s": round(pred.output_tok_s, 2),
            "per_user_tok_s": round(pred.per_user_tok_s, 2),
            "measured": bool(pred.measured and pred.fitted),
        }
        for sessions, pred in sorted(best.items())
    }
    document = {"per_position": list(p), "recommendations": recommendations, "lines": render(p, predictions, None)}
    ctx.write_json(ctx.out / "advisor.json", document)
    summary = ", ".join(f"{s} sessions: k={r['k']}" for s, r in recommendations.items())
    return Outcome(DONE, summary, {"file": "advisor.json", "recommendations": recommendations})


def _measured_only(ctx: Context, runs: list[Any], why: str) -> Outcome:
    """Per concurrency, the measured k with the highest aggregate tok/s (no model, no prediction)."""
    best: dict[int, Any] = {}
    for run in runs:
        if run.sessions not in best or run.output_tok_s > best[run.sessions].output_tok_s:
            best[run.sessions] = run
    recommendations = {
        str(sessions): {
            "k": run.k,
            "output_tok_s": round(run.output_tok_s, 2),
            "per_user_tok_s": round(run.per_user_tok_s, 2),
            "measured": True,
        }
        for sessions, run in sorted(best.items())
    }
    lines = [f"advisor model not fitted: {why}", "recommendation among the measured k only (no k predicted)"]
    ctx.write_json(ctx.out / "advisor.json", {"per_position": [], "recommendations": recommendations, "lines": lines})
    summary = ", ".join(f"{s} sessions: k={r['k']}" for s, r in recommendations.items())
    return Outcome(DONE, f"{summary} (measured k only: {why.split(':')[0]})", {"file": "advisor.json"})


STEPS: dict[str, Callable[[Context], Outcome]] = {
    "environment": environment_step,
    "preflight": preflight_step,
    "reference": reference_step,
    "candidate": candidate_step,
    "fp8": fp8_step,
    "grid": grid_step,
    "graphs": graphs_step,
    "acceptance": acceptance_step,
    "per_request": per_request_step,
    "goodput": goodput_step,
    "advisor": advisor_step,
    "synthetic": synthetic_step,
}
