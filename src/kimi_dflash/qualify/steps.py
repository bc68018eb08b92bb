"""The steps of a qualification as resumable units; each reads earlier steps' files only (docs/qualify.md, Steps)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from kimi_dflash.config.schema import KEY
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.user_files import read_log_tail
from kimi_dflash.qualify import context, lossless, measures
from kimi_dflash.qualify.amplitude import amplitude_step, own_side
from kimi_dflash.qualify.context import Context, grid_results
from kimi_dflash.qualify.depths import grid_hooks, schedule_step
from kimi_dflash.qualify.documents import Acceptance, AcceptanceRow, Advisor, Goodput, Graphs, PerRequest, Projection
from kimi_dflash.qualify.documents import Recommendation as Rec
from kimi_dflash.qualify.environment import capture, served_plan
from kimi_dflash.qualify.graphs import graph_mode_from_log
from kimi_dflash.qualify.lossless import GreedyOutputs, LosslessVerdict
from kimi_dflash.runs.orchestrator import Outcome, Unit
from kimi_dflash.runs.state import DONE, FAILED, SKIPPED
from kimi_dflash.sweep import state as points_state
from kimi_dflash.sweep.grid import Point
from kimi_dflash.sweep.points import run_points

__all__ = ["Context", "grid_results"]  # tests and fakes reach them here


def environment_step(ctx: Context) -> Outcome:
    document = capture(ctx.config_as_given, ctx.values, ctx.overrides, ctx.plan.to_json(), served_plan(ctx.config))
    ctx.write(path := ctx.out / "environment.json", document)
    accelerators = ", ".join(document.accelerators) or "no accelerator tool found"
    versions = ", ".join(f"{k} {v}" for k, v in document.versions.items() if v)
    return Outcome(DONE, f"{document.host.hostname}: {accelerators}; {versions}", ctx.files(path))


def preflight_step(ctx: Context) -> Outcome:
    """As `serve.sh` runs it before a start, for the config and each candidate's; any FAIL stops the run before one."""
    from kimi_dflash.config.problems import ConfigError
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.launch.prepare import prepare
    from kimi_dflash.launch.serve_sh import free_port

    lines: list[str] = []
    ok = True
    for path in (ctx.config, *(Path(c.path) for c in ctx.plan.candidates)):
        lines += [f"== {path.name}"] if ctx.plan.candidates else []
        try:
            # The port is picked per server by qualify: check one that is free, not the config's.
            config = load_config(path, environ={**os.environ, KEY.PORT: str(free_port())})
            prepared = prepare(config, create=True, say=lines.append)  # what serve serves, remedies applied
            # As serve's start runs it: a server starts next, and vLLM imports itself first thing (no import here).
            ok = prepared.preflight(fix_numa=False, say=lines.append, starting=True) and ok
        except ConfigError as error:
            lines.extend(p.render() for p in error.problems)
            ok = False
    path, text = ctx.out / "preflight.txt", "\n".join(lines)
    ctx.record(path)
    write_text_atomic(path, text + "\n")
    failing = [line for line in text.splitlines() if "FAIL" in line]
    if not ok:
        outputs = ctx.files(path).model_copy(update={"failing": failing})
        return Outcome(FAILED, "preflight failed: " + ("; ".join(failing[:5]) or "see preflight.txt"), outputs)
    return Outcome(DONE, "preflight passed (see preflight.txt)", ctx.files(path))


def reference_step(ctx: Context) -> Outcome:
    """The config without speculation: its greedy outputs (and math answers when FP8 KV needs them), then k=0."""
    ref_path, math_path = ctx.lossless_dir / "reference.json", ctx.lossless_dir / "reference-math.json"

    def outputs(url: str) -> None:
        context.shipped_outputs(ctx, ref_path, url)
        if ctx.plan.fp8_kv and not math_path.is_file():
            ctx.write(math_path, lossless.math_outputs(url, 256))

    done = ref_path.is_file() and (math_path.is_file() or not ctx.plan.fp8_kv)
    plan, point = ctx.points(), ctx.point(0)
    return context.point_outcome(ctx, plan, point, context.serve(ctx, plan, point, None if done else outputs), ref_path)


def candidate_step(ctx: Context) -> Outcome:
    cand_path, verdict_path = ctx.lossless_dir / "candidate.json", ctx.lossless_dir / "verdict.json"
    same_tokenizer = ctx.same_target and not any(key in context.MODEL_KEYS for key, _ in ctx.candidate_env)
    judge = context.against_reference(ctx, cand_path, verdict_path, same_tokenizer, "lossless")
    plan, point = ctx.points(), ctx.point(ctx.plan.spec_tokens)
    # ... and the amplitude step's benchmark of the config's own side
    hooks = context.chained(None if verdict_path.is_file() else judge, own_side(ctx))
    outcome = context.point_outcome(ctx, plan, point, context.serve(ctx, plan, point, hooks), verdict_path)
    verdict = context.verdict_of(ctx, None)
    return Outcome(
        outcome.status, outcome.detail, outcome.outputs.model_copy(update={"verdict": verdict and verdict.verdict})
    )


def fp8_step(ctx: Context) -> Outcome:
    """FP8 KV against BF16 KV (fp8/validate.py's thresholds): the reference's outputs vs a BF16-KV server's."""
    from kimi_dflash.fp8.validate import Fp8Summary, Thresholds, kv_capacity_from_log, verdict_lines
    from kimi_dflash.validate.engine import compare_tokens, summarize_agreement

    ref_path, math_path = ctx.lossless_dir / "reference.json", ctx.lossless_dir / "reference-math.json"
    if not (ref_path.is_file() and math_path.is_file()):
        return Outcome(FAILED, "no FP8 reference outputs (the reference step failed)")
    log = ctx.out / "logs" / "bf16-kv.server.log"
    ctx.record(log)
    bf16_env = {KEY.KV_CACHE_DTYPE: "auto", KEY.KV_SCALE_MODE: "off", KEY.SPECULATIVE_METHOD: "none"}
    with ctx.points().servers.serving("bf16-kv", bf16_env, log, ctx.say) as started:
        if started.detail:
            return Outcome(FAILED, f"the BF16-KV server did not start: {started.detail}")
        fp8_doc = GreedyOutputs.load(ref_path)
        bf16_doc = lossless.generate(started.base_url, fp8_doc.prompts, fp8_doc.max_tokens)
        bf16_math = lossless.math_outputs(started.base_url, 256)
    pairs = [
        compare_tokens(a.token_ids or [], b.token_ids or []) for a, b in zip(bf16_doc.completions, fp8_doc.completions)
    ]
    math_bf16, math_fp8 = lossless.math_accuracy(bf16_math, GreedyOutputs.load(math_path))
    fp8_log = points_state.server_log(ctx.grid_dir, ctx.point(0))
    bf16_kv, fp8_kv = (kv_capacity_from_log(read_log_tail(p if p.is_file() else None)) for p in (log, fp8_log))
    status, reasons = verdict_lines(summarize_agreement(pairs), math_bf16, math_fp8, (bf16_kv, fp8_kv), Thresholds())
    capacity = {"kv_capacity_bf16": bf16_kv, "kv_capacity_fp8": fp8_kv}
    summary = Fp8Summary(verdict=status, reasons=reasons, math_bf16=math_bf16, math_fp8=math_fp8, **capacity)
    ctx.write(ctx.out / "fp8.json", summary)
    return Outcome(DONE, f"FP8 KV {status}", ctx.files(ctx.out / "fp8.json").model_copy(update={"verdict": status}))


def grid_step(ctx: Context) -> Outcome:
    """Every remaining point of the k x concurrency grid (sweep points: resumable, failures recorded)."""
    plan = ctx.points()
    tally = run_points(plan, what="grid", on_ready=grid_hooks(ctx))
    finished = [points_state.result_path(plan.out, p) for p in plan.points if points_state.finished_result(plan.out, p)]
    detail = f"{tally.ran} point(s) run now, {tally.kept} already finished, {tally.failed} failed"
    if tally.failed:
        failures = [f"{f.point} ({f.stage}): {f.detail}" for f in points_state.read_failures(plan.out)]
        return Outcome(FAILED, f"{detail}: {'; '.join(failures)}", ctx.files(*finished))
    return Outcome(DONE, detail, ctx.files(*finished))


def graphs_step(ctx: Context) -> Outcome:
    """Outputs vs the eager reference's are evidence, not a verdict; results in graphs/ (same k as the candidate)."""
    k = ctx.plan.spec_tokens
    point = Point(((KEY.NUM_SPECULATIVE_TOKENS, str(k)), *ctx.plan.graph_overrides))
    plan = ctx.points([point], ctx.out / "graphs")
    own_path, identity_path = ctx.lossless_dir / "graphs.json", ctx.lossless_dir / "graphs-identity.json"
    judge = context.against_reference(ctx, own_path, identity_path, True, "token identity")
    hook = None if identity_path.is_file() else judge
    errors = context.serve(ctx, plan, point, hook)
    log = points_state.server_log(plan.out, point)
    mode = graph_mode_from_log(read_log_tail(log if log.is_file() else None))
    result = points_state.finished_result(plan.out, point)
    identity = LosslessVerdict.load_or_none(identity_path)
    document = Graphs(
        overrides=list(ctx.plan.graph_overrides),
        cudagraph_mode=mode.mode,
        downgraded=mode.downgraded,
        mode_evidence=mode.line,
        identity=identity and identity.agreement,
        rows=[] if result is None else measures.graph_rows(grid_results(ctx), result, k),
        result=points_state.result_path(plan.out, point).relative_to(ctx.out).as_posix(),
    )
    ctx.write(path := ctx.out / "graphs.json", document)
    if errors:
        return Outcome(FAILED, "; ".join(errors), ctx.files(path))
    found = [(r.sessions, r.speedup_vs_eager) for r in document.rows if r.speedup_vs_eager is not None]
    speedups = ", ".join(f"{sessions}: {speedup}x" for sessions, speedup in found)
    downgrade = " (lowered after start-up: vllm #49547)" if mode.downgraded else ""
    detail = f"cudagraph_mode {mode.mode or 'not in the log'}{downgrade}; vs the eager candidate at sessions {speedups}"
    return Outcome(DONE, detail, ctx.files(path))


def synthetic_step(ctx: Context) -> Outcome:
    """Speed only, kept out of grid/ so that nothing judges outputs by it."""
    from kimi_dflash.config.acceptance_rates import format_rate

    step = next(s for s in ctx.plan.steps if s.name == "synthetic")
    if not step.runs:
        return Outcome(SKIPPED, step.reason)
    rates = ctx.plan.projection
    text = ",".join(map(format_rate, rates))
    point = Point(((KEY.NUM_SPECULATIVE_TOKENS, str(len(rates))), (KEY.SYNTHETIC_ACCEPTANCE_RATES, text)))
    plan = ctx.points([point], ctx.out / "projection")
    errors = context.serve(ctx, plan, point, None)
    result = points_state.finished_result(plan.out, point)
    if result is None:
        return Outcome(FAILED, "; ".join(errors) or "the projection point did not finish", ctx.files(plan.out))
    rows = measures.projection_rows(grid_results(ctx), result, rates, ctx.plan.spec_tokens)
    what = (
        "a projection of speed, not of quality: vLLM's synthetic rejection sampler accepted drafts at the given "
        "per-position rates without checking them against the target"
    )
    raw = points_state.result_path(plan.out, point).relative_to(ctx.out).as_posix()
    document = Projection(what=what, rates=list(rates), k=len(rates), rows=rows, result=raw)
    summary = ", ".join(f"{r.sessions} sessions: {r.speedup}x" for r in rows if r.speedup is not None)
    detail = f"k={len(rates)} at {','.join(map(format_rate, rates))}: {summary or 'no reference level to compare'}"
    return context.written(ctx, "projection.json", document, len(rows), detail)


def acceptance_step(ctx: Context) -> Outcome:
    """Acceptance by draft position at every speculative point and concurrency (Prometheus counter deltas)."""
    rows = []
    for name, result in grid_results(ctx):
        k = int(result.server_config.overrides.get(KEY.NUM_SPECULATIVE_TOKENS, "0")) if result.server_config else 0
        for level in result.results:
            spec = level.spec_decode
            if k and spec is not None and spec.per_position:
                rows.append(
                    AcceptanceRow(
                        point=name,
                        k=k,
                        sessions=level.sessions,
                        per_position=spec.per_position,
                        acceptance_rate=spec.acceptance_rate,
                        drafts=spec.drafts,
                        acceptance_length=spec.acceptance_length,
                    )
                )
    if not rows:
        return Outcome(FAILED, "no speculative grid point reported acceptance counters")
    detail = f"{len(rows)} (point, concurrency) rows"
    return context.written(ctx, "acceptance.json", Acceptance(rows=rows), len(rows), detail)


def per_request_step(ctx: Context) -> Outcome:
    rows = measures.per_request_rows(grid_results(ctx))
    if not rows:
        asked = " ".join(f"{k}={v}" for k, v in ctx.plan.server_env) or KEY.PER_REQUEST_SPEC_METRICS
        why = "no speculative grid point's replies carried metrics.speculative_decoding (was the server started with"
        return Outcome(FAILED, f"{why} {asked}?)")
    equal = [r for r in rows if r.counter_accepted is not None]
    same = sum(r.total.accepted == r.counter_accepted for r in equal)
    summary = ", ".join(f"k={r.k}@{r.sessions}: tau {r.total.tau}" for r in rows if r.total.tau is not None)
    detail = f"{len(rows)} (point, concurrency) rows; per-request sums equal the /metrics deltas in {same}/{len(equal)}"
    return context.written(ctx, "per_request.json", PerRequest(rows=rows), len(rows), f"{detail}; {summary}"[:400])


def goodput_step(ctx: Context) -> Outcome:
    from kimi_dflash.bench.goodput import DEFAULT_ATTAINMENT, describe, parse_slo

    results, plan = grid_results(ctx), ctx.plan
    rows = measures.goodput_rows(results)
    if not rows:
        return Outcome(FAILED, "no grid result carries goodput (were the benchmarks run with --slo?)")
    slo = parse_slo(plan.slo)
    source = plan.box.slo_source if plan.slo == plan.box.slo else "given with --slo"
    at_slo, matched = measures.at_slo(results, DEFAULT_ATTAINMENT), measures.matched(results)
    document = Goodput(
        slo=slo,
        slo_text=describe(slo),
        slo_source=source,
        threshold=DEFAULT_ATTAINMENT,
        rows=rows,
        at_slo=at_slo,
        matched=matched,
    )
    at = ", ".join(f"k={r.k}: {r.speedup}x" for r in document.at_slo if r.speedup is not None)
    detail = f"{len(rows)} (point, concurrency) rows; speedup at the SLO: {at or 'none (a side sustains no level)'}"
    return context.written(ctx, "goodput.json", document, len(rows), detail)


def advisor_step(ctx: Context) -> Outcome:
    """A budget-trimmed grid may hold one k >= 1: no slope to fit, so the measured points alone are compared."""
    from kimi_dflash.advisor.cli import render
    from kimi_dflash.advisor.model import Prediction, measurements, predict, recommend
    from kimi_dflash.core.errors import UserError

    try:
        runs = measurements(grid_results(ctx))
    except UserError as exc:
        return Outcome(FAILED, str(exc))
    try:
        p, predictions = predict(runs)
        document, note = Advisor(per_position=list(p), recommendations={}, lines=render(p, predictions, None)), ""
    except UserError as exc:  # the measured k only, each its own (fitted) prediction
        predictions = [
            Prediction(m.k, m.sessions, m.tau, m.step_s, m.per_user_tok_s, m.output_tok_s, m, True) for m in runs
        ]
        lines = [f"advisor model not fitted: {exc}", "recommendation among the measured k only (no k predicted)"]
        document = Advisor(per_position=[], recommendations={}, lines=lines)
        note = f" (measured k only: {str(exc).split(':')[0]})"
    for sessions, r in sorted(recommend(predictions).items()):
        document.recommendations[str(sessions)] = Rec(
            k=r.k,
            output_tok_s=round(r.output_tok_s, 2),
            per_user_tok_s=round(r.per_user_tok_s, 2),
            measured=bool(r.measured and r.fitted),
        )
    summary = ", ".join(f"{s} sessions: k={r.k}" for s, r in document.recommendations.items())
    return context.written(ctx, "advisor.json", document, len(document.recommendations), summary + note)


def ranking_step(ctx: Context) -> Outcome:
    from kimi_dflash.qualify import shootout

    measured = []
    for c in ctx.plan.candidates:
        sub = ctx.candidate(c.name)
        advisor = Advisor.load_or_none(sub.out / "advisor.json")
        measured.append(shootout.Measured(c, grid_results(sub), context.verdict_of(sub, None), advisor))
    document = shootout.rank(ctx.plan.slo, measured)
    ranked = [f"{r.rank}. {r.candidate}" for r in document.rows if r.rank is not None]
    if not ranked:
        return Outcome(FAILED, f"no candidate ranked: {'; '.join(f'{r.candidate}: {r.note}' for r in document.rows)}")
    return context.written(ctx, "shootout.json", document, len(ranked), f"{document.ranked_by}: {', '.join(ranked)}")


STEPS: dict[str, Callable[[Context], Outcome]] = {
    "environment": environment_step,
    "preflight": preflight_step,
    "reference": reference_step,
    "candidate": candidate_step,
    "amplitude": amplitude_step,
    "fp8": fp8_step,
    "grid": grid_step,
    "schedule": schedule_step,
    "graphs": graphs_step,
    "acceptance": acceptance_step,
    "per_request": per_request_step,
    "goodput": goodput_step,
    "advisor": advisor_step,
    "synthetic": synthetic_step,
    "ranking": ranking_step,
}


def step_units(ctx: Context) -> list[Unit]:
    """A shoot-out candidate's steps are named <candidate>/<step> and run in its context."""
    units = []
    for s in ctx.plan.steps:
        owner, _, name = s.name.rpartition("/")
        if name in STEPS:
            sub = ctx.candidate(owner) if owner else ctx
            units.append(Unit(s.name, lambda say, n=name, c=sub: STEPS[n](c), s.estimate_s, s.runs, s.reason))
    return units
