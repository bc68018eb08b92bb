"""The drafter RoPE amplitude, measured: each side served, judged, compared (docs/qualify.md, "The RoPE amplitude")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from kimi_dflash.bench.intervals import mean_interval, ratio_interval
from kimi_dflash.bench.result import LevelResult
from kimi_dflash.bench.spec_summary import spec_per_request
from kimi_dflash.config.schema import KEY
from kimi_dflash.core.formatting import markdown_table, number, percent, ratio
from kimi_dflash.qualify.context import Context, judged, serve, tolerant, verdict_of
from kimi_dflash.qualify.documents import Amplitude, AmplitudeSide, Estimate, shown
from kimi_dflash.qualify.plan import Sides, bench_args
from kimi_dflash.rules.rope_amplitude import ENGINE, LEGACY, UnreadableRope, concerned, decide
from kimi_dflash.rules.rope_amplitude import same_amplitude as same
from kimi_dflash.runs.orchestrator import Outcome
from kimi_dflash.runs.state import DONE, FAILED
from kimi_dflash.sweep import state as points_state
from kimi_dflash.sweep.grid import Point
from kimi_dflash.sweep.points import OnReady, PointPlan, benchmark_point

if TYPE_CHECKING:
    from kimi_dflash.rules.source import VllmSource

DOCUMENT = "amplitude.json"


def probe(config: Path, source: VllmSource | None) -> tuple[Sides, str]:
    """The sides to measure (choice, amplitude, served by the candidate's server) where they differ; else none, why."""
    from kimi_dflash.checkpoint import read_facts
    from kimi_dflash.config.problems import ConfigError
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.launch.prepare import resolve_demo_models

    try:
        typed = resolve_demo_models(load_config(config, environ=os.environ), create=False, say=lambda _: None).typed
    except (ConfigError, OSError) as error:
        return (), f"the config does not load ({error})"
    if typed.speculative_method != "dflash":
        return (), f"SPECULATIVE_METHOD={typed.speculative_method}: the amplitude in question is a DFlash drafter's"
    facts = read_facts(typed)
    drafter, missing = facts.drafter, "its config.json is not here and no facts ship for it"
    if drafter is None:
        return (), f"the drafter: {next(iter(facts.problems.values()), missing)}"
    factor = drafter.rope and drafter.rope.attention_factor
    if not concerned(drafter) or factor is not None:
        states = f"attention_factor {factor}" if factor is not None else "no YaRN rope it understands"
        return (), f"the drafter's config.json states {states}: one amplitude on every release"
    if source is None:
        return (), "no vLLM found by this Python to read the amplitudes from"
    try:
        engine, legacy = decide(drafter, source, ENGINE), decide(drafter, source, LEGACY)
    except UnreadableRope as error:
        return (), f"cannot read this vLLM's amplitude ({error})"
    if same(engine.served, legacy.served) or legacy.fix:
        return (), engine.message if same(engine.served, legacy.served) else legacy.message
    own = typed.drafter_rope_choice
    return ((LEGACY, legacy.served, own == LEGACY), (ENGINE, engine.served, own == ENGINE)), ""


def _point(ctx: Context, choice: str) -> Point:
    return Point(((KEY.NUM_SPECULATIVE_TOKENS, str(ctx.plan.spec_tokens)), (KEY.DRAFTER_ROPE_AMPLITUDE, choice)))


def _plan(ctx: Context) -> PointPlan:
    """One level, the grid's highest concurrency, with every request's record (acceptance per repeat)."""
    sessions = (max(ctx.plan.sessions),)
    points = [_point(ctx, choice) for choice, *_ in ctx.plan.amplitudes]
    return ctx.points(points, ctx.out / "amplitude", sessions, (*bench_args(ctx.plan.box), "--record-requests"))


def _by_candidate(ctx: Context) -> str | None:
    """The side the candidate's server serves (the config as given), unless --candidate-env changes it."""
    return next((c for c, _, own in ctx.plan.amplitudes if own), None) if not ctx.candidate_env else None


def own_side(ctx: Context) -> OnReady | None:
    """A hook measuring the config's own side while the candidate is up; on failure the step serves that side itself."""
    choice = _by_candidate(ctx)
    if choice is None or points_state.finished_result(ctx.out / "amplitude", _point(ctx, choice)):
        return None

    def benchmark(url: str) -> None:
        outcome = benchmark_point(_plan(ctx), _point(ctx, choice), urlsplit(url).port or 0, say)
        if outcome.status == FAILED:
            raise RuntimeError(outcome.detail)

    say = lambda text: ctx.say(f"qualify: amplitude {choice}: {text}")  # noqa: E731
    return tolerant(benchmark, lambda text: say(f"{text}; the amplitude step serves it itself"))


def repeats(level: LevelResult) -> list[list[float]]:
    """Acceptance by draft position per repeat (per-request counts; else the level's /metrics deltas, one sample)."""
    records = [r for r in (level.request_records.records if level.request_records else []) if r.ok and not r.warmup]
    by_repeat = sorted({r.repeat for r in records if r.spec is not None})
    tables = [spec_per_request([r for r in records if r.repeat == repeat]) for repeat in by_repeat]
    found = [table.per_position for table in tables if table is not None and table.per_position]
    return found or ([level.spec_decode.per_position] if level.spec_decode and level.spec_decode.per_position else [])


def estimate(values: Sequence[float]) -> Estimate | None:
    found = mean_interval(values)
    return None if found is None else Estimate(mean=found.mean, low=found.low, high=found.high)


def side(ctx: Context, choice: str, amplitude: float, what: str | None) -> AmplitudeSide:
    verdict, path = verdict_of(ctx, what), ctx.lossless_dir / (f"verdict-{what}.json" if what else "verdict.json")
    result = points_state.finished_result(ctx.out / "amplitude", _point(ctx, choice))
    samples = repeats(result.results[0]) if result and result.results else []
    positions = [estimate(column) for column in zip(*samples)]
    taus = [1.0 + sum(sample) for sample in samples]
    return AmplitudeSide(
        choice=choice,
        amplitude=round(amplitude, 7),
        lossless=verdict.verdict if verdict else "NOT RUN",
        verdict_file=path.relative_to(ctx.out).as_posix(),
        result=None if result is None else f"amplitude/{_point(ctx, choice).name}.json",
        per_position=[p for p in positions if p],
        tau_repeats=taus,
        tau=estimate(taus),
    )


def recommend(sides: Sequence[AmplitudeSide], own: str | None) -> tuple[str | None, Estimate | None, str]:
    """The lossless side with the higher tau; a lead inside the ratio's interval ties: the config's own stays."""
    fit = sorted((s for s in sides if s.lossless == "PASS" and s.tau), key=lambda s: -s.tau.mean)  # type: ignore[union-attr]
    if not fit:
        return None, None, "neither amplitude was served losslessly with its acceptance measured"
    best, *rest = fit
    if not rest:
        return best.choice, None, f"the only one lossless with its acceptance measured ({best.choice})"
    beat = ratio_interval(best.tau_repeats, rest[0].tau_repeats)
    found = Estimate.of(beat)
    figure = f"τ {best.tau.mean:.2f} vs {rest[0].tau.mean:.2f} per verify step, {shown(found, ratio)}"  # type: ignore[union-attr]
    if found is None or found.low is None or found.low <= 1.0:
        keep = own if own in (best.choice, rest[0].choice) else best.choice
        return keep, found, f"a tie ({best.choice} {figure}: within the interval); the config's own, {keep}, is kept"
    return best.choice, found, f"{best.choice} accepts more: {figure}"


def amplitude_step(ctx: Context) -> Outcome:
    plan, errors = _plan(ctx), []
    by_candidate = _by_candidate(ctx)
    for choice, _, _ in ctx.plan.amplitudes:
        what = None if choice == by_candidate else f"rope-{choice}"
        if what is None and verdict_of(ctx, None) is None:
            errors.append(f"{choice}: the candidate step left no lossless verdict for it")
        errors += [f"{choice}: {e}" for e in serve(ctx, plan, _point(ctx, choice), what and judged(ctx, what))]
    own = by_candidate or next((c for c, _, mine in ctx.plan.amplitudes if mine), None)
    sides = [side(ctx, c, a, None if c == by_candidate else f"rope-{c}") for c, a, _ in ctx.plan.amplitudes]
    choice, beat, why = recommend(sides, own)
    # legacy names one amplitude on every release; engine is this release's, so a tuned config names its number
    value = next((LEGACY if choice == LEGACY else repr(s.amplitude) for s in sides if s.choice == choice), None)
    document = Amplitude(sessions=plan.sessions[0], sides=sides, recommended=choice, value=value, ratio=beat, why=why)
    ctx.write(ctx.out / DOCUMENT, document)
    outputs = ctx.files(ctx.out / DOCUMENT)
    detail = f"{KEY.DRAFTER_ROPE_AMPLITUDE}={value} recommended: {why}" if value else why
    return Outcome(FAILED if errors else DONE, "; ".join([*errors, detail]), outputs)


def section(document: Amplitude | None, why_not: str) -> list[str]:
    if document is None:
        return [f"*(not measured: {why_not})*"]
    width = max((len(s.per_position) for s in document.sides), default=0)
    header = [KEY.DRAFTER_ROPE_AMPLITUDE, "amplitude", *(f"pos {i + 1}" for i in range(width))]
    header += ["τ (per verify step)", "lossless"]
    rows = [
        [
            s.choice,
            number(s.amplitude, 4),
            *(shown(p, percent, 100, 1) for p in s.per_position),
            shown(s.tau),
            f"{s.lossless} (`{s.verdict_file}`)",
        ]
        for s in document.sides
    ]
    files = ", ".join(f"`{s.result}`" for s in document.sides if s.result)
    return [
        f"The drafter served with each amplitude at {document.sessions} sessions, the same prompts, k and T=0; "
        f"acceptance per position over the repeats with its 95 % interval (every request's own counts). {files}.",
        "",
        *markdown_table(header, "lr" + "r" * (width + 1) + "l", rows),
        "",
        f"**Recommended: `{KEY.DRAFTER_ROPE_AMPLITUDE}={document.value}`** — {document.why}."
        if document.value
        else f"No amplitude recommended: {document.why}.",
    ]
