"""Depth by load, judged on the box: each depth judged, advise's schedule served and compared (docs/qualify.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from kimi_dflash.advisor.schedule import Choice, Samples, choose_depths, grid_samples, repeats_of, schedule_of
from kimi_dflash.bench.intervals import ratio_interval
from kimi_dflash.config.depth_schedule import format_schedule
from kimi_dflash.config.schema import KEY
from kimi_dflash.config.validate import typed_values
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.formatting import markdown_table, number, ratio
from kimi_dflash.qualify.amplitude import estimate
from kimi_dflash.qualify.context import Context, grid_results, judged, serve, tolerant, verdict_of
from kimi_dflash.qualify.documents import Estimate, Schedule, ScheduleChoice, ScheduleRow, shown
from kimi_dflash.runs.orchestrator import Outcome
from kimi_dflash.runs.state import DONE, FAILED, SKIPPED
from kimi_dflash.sweep import state as points_state
from kimi_dflash.sweep.grid import Point
from kimi_dflash.sweep.points import OnReady

AITER, TRITON = "ROCM_AITER_MLA", "TRITON_MLA"
DOCUMENT, PLOT = "schedule.json", "schedule_vs_fixed_k.png"


def grid_hooks(ctx: Context) -> Callable[[Point], OnReady | None]:
    """Each extra depth of the grid judged while its server is up; a judgement that raises is only said."""

    def hook(point: Point) -> OnReady | None:
        k = int(dict(point.overrides).get(KEY.NUM_SPECULATIVE_TOKENS, "0"))
        check = None if k in (0, ctx.plan.spec_tokens) else judged(ctx, f"k{k}")
        return check and tolerant(check, lambda text: ctx.say(f"qualify: k={k}: not judged ({text})"))

    return hook


def depth_verdicts(ctx: Context) -> dict[int, str]:
    """The token-identity verdict of every depth in the grid (NOT RUN: none on disk)."""
    found = {k: verdict_of(ctx, None if k == ctx.plan.spec_tokens else f"k{k}") for k in ctx.plan.k_values if k}
    return {k: v.verdict if v else "NOT RUN" for k, v in sorted(found.items())}


def on_aiter(values: Mapping[str, str]) -> bool:
    return (typed := typed_values(values)).device == "rocm" and typed.rocm_use_aiter_mla


@dataclass(frozen=True)
class DepthDecision:
    choices: list[Choice]  # per measured concurrency, the depth served there
    backend: str | None  # TRITON when the depths move there; None: as configured
    notes: list[str]


def decide(samples: Samples, verdicts: Mapping[int, str], aiter: bool, confidence: float = 0.95) -> DepthDecision:
    """advise's choice among the lossless depths; on ROCM_AITER_MLA with none lossless, every depth moves to TRITON_MLA.
    UserError: no interval to choose by (pure)."""
    depths = sorted({k for k, _ in samples if k >= 1})
    lossless = [k for k in depths if verdicts.get(k) == "PASS"]
    notes = [f"k={k}: token identity {verdicts.get(k, 'NOT RUN')} on this backend" for k in depths if k not in lossless]
    if lossless:
        kept = {key: values for key, values in samples.items() if key[0] in lossless}
        return DepthDecision(choose_depths(kept, confidence), None, [f"{n}: dropped" for n in notes])
    if aiter and depths:
        moved = f"no depth is lossless on {AITER}: every depth moves to {TRITON} ({KEY.ROCM_USE_AITER_MLA}=false)"
        return DepthDecision(choose_depths(samples, confidence), TRITON, [*notes, moved])
    return DepthDecision([], None, [*notes, "no depth is lossless: no schedule"])


def compare(
    choices: Sequence[Choice], schedule: Mapping[int, Sequence[float]], fixed: Samples, confidence: float = 0.95
) -> list[ScheduleRow]:
    """Per concurrency: the schedule's aggregate tok/s against every fixed k's, and over the best one's (interval)."""
    rows = []
    for c in choices:
        mine = list(schedule.get(c.sessions, ()))
        theirs = {k: mean(v) for (k, s), v in fixed.items() if s == c.sessions and k >= 1 and v}
        best = max(theirs, key=lambda k: theirs[k], default=None)
        beat = ratio_interval(mine, fixed[best, c.sessions], confidence) if best is not None and mine else None
        rows.append(
            ScheduleRow(
                sessions=c.sessions,
                k=c.k,
                schedule_tok_s=estimate(mine),
                fixed_tok_s=theirs,
                best_k=best,
                vs_best=Estimate.of(beat),
            )
        )
    return rows


def schedule_step(ctx: Context) -> Outcome:
    samples, path, depths = grid_samples(grid_results(ctx)), ctx.out / DOCUMENT, depth_verdicts(ctx)
    try:
        decision = decide(samples, depths, on_aiter(ctx.values))
    except UserError as exc:
        ctx.write(path, Schedule(depths=depths, why=f"no schedule: {exc}"))
        return Outcome(SKIPPED, f"no schedule: {exc}", ctx.files(path))
    ranges = schedule_of(decision.choices)
    text, top = format_schedule(ranges), max((r.k for r in ranges), default=None)
    choices = [
        ScheduleChoice(
            sessions=c.sessions,
            k=c.k,
            output_tok_s=round(c.output_tok_s, 2),
            over=c.over,
            ratio=Estimate.of(c.interval),
        )
        for c in decision.choices
    ]
    common = dict(depths=depths, spec_tokens=top, choices=choices, notes=decision.notes, backend=decision.backend)
    if len({r.k for r in ranges}) < 2 and decision.backend is None:  # no depth, or one k at every load
        why = decision.notes[-1] if top is None else f"k={top} at every measured load: a fixed k, measured in the grid"
        ctx.write(path, Schedule(why=why, **common))  # type: ignore[arg-type]
        return Outcome(DONE, why, ctx.files(path))
    triton = [(KEY.ROCM_USE_AITER_MLA, "false")] * bool(decision.backend)
    point = Point(((KEY.NUM_SPECULATIVE_TOKENS, str(top)), (KEY.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE, text), *triton))
    plan = ctx.points([point], ctx.out / "schedule")
    errors = serve(ctx, plan, point, judged(ctx, "schedule"))
    result, verdict = points_state.finished_result(plan.out, point), verdict_of(ctx, "schedule")
    served = {level.sessions: repeats_of(level) for level in (result.results if result else []) if not level.partial}
    document = Schedule(
        why=f"{KEY.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE}={text} served"
        + (f" on {decision.backend}" if decision.backend else ""),
        schedule=text,
        rows=compare(decision.choices, served, samples),
        lossless=verdict.verdict if verdict else "NOT RUN",
        result=points_state.result_path(plan.out, point).relative_to(ctx.out).as_posix() if result else None,
        **common,  # type: ignore[arg-type]
    )
    ctx.write(path, document)
    versus = ", ".join(f"{r.sessions}: {ratio(r.vs_best and r.vs_best.mean)}" for r in document.rows)
    detail = f"{document.why}, lossless {document.lossless}; over the best fixed k at sessions {versus}"
    return Outcome(FAILED if errors else DONE, "; ".join([*errors, detail]), ctx.files(path))


def section(document: Schedule | None, why_not: str, plots: Sequence[Path] = ()) -> list[str]:
    if document is None:
        return [f"*(not measured: {why_not})*"]
    depths = ", ".join(f"k={k} {v}" for k, v in document.depths.items())
    lines = [f"Token identity by depth (T=0, the shipped prompts): {depths}.", *(f"- {n}" for n in document.notes), ""]
    if not document.rows:
        return [*lines, f"*{document.why}*"]
    ks = sorted({k for r in document.rows for k in r.fixed_tok_s})
    header = ["sessions", "scheduled k", "schedule tok/s", *(f"k={k} tok/s" for k in ks), "vs best fixed k"]
    rows = [
        [
            r.sessions,
            r.k,
            shown(r.schedule_tok_s, number, 1, 1),
            *(number(r.fixed_tok_s.get(k)) for k in ks),
            f"{shown(r.vs_best, ratio)} (k={r.best_k})",
        ]
        for r in document.rows
    ]
    served = f"`{KEY.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE}={document.schedule}` "
    served += f"(lossless {document.lossless}, `{document.result}`)"
    return [
        *lines,
        f"{served if document.schedule else document.why}; aggregate tok/s per concurrency, mean over repeats with "
        "the 95 % interval; the last column: the schedule over the fastest fixed k there.",
        "",
        *markdown_table(header, "r" * len(header), rows),
        *(["", *(f"![{p.stem}]({p.name})" for p in plots)] if plots else []),
    ]


def write_plot(document: Schedule | None, out: Path) -> list[Path]:
    """Aggregate tok/s against concurrency: one line per fixed k, and the schedule's."""
    if document is None or not document.rows:
        return []
    from kimi_dflash.bench.plots import line_chart

    xs = [r.sessions for r in document.rows]
    series = {
        f"k={k}": (xs, [r.fixed_tok_s.get(k, float("nan")) for r in document.rows])
        for k in sorted({k for r in document.rows for k in r.fixed_tok_s})
    }
    if document.schedule:
        means = [r.schedule_tok_s.mean if r.schedule_tok_s else float("nan") for r in document.rows]
        series[f"schedule {document.schedule}"] = (xs, means)
    title = "Depth by load: the schedule against every fixed k"
    axes = ("concurrent sessions", "aggregate output tok/s")
    return [line_chart(out / PLOT, series, title, *axes, legend_size=8, xticks=xs)]
