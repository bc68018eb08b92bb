"""The qualification plan (pure; ``--dry-run`` prints it); each box's estimates name their source (docs/qualify.md)."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import TypeAdapter

from kimi_dflash.bench.goodput import describe, parse_slo
from kimi_dflash.config.schema import KEY
from kimi_dflash.config.validate import typed_values
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.formatting import duration as format_duration
from kimi_dflash.documents import Json
from kimi_dflash.qualify.graphs import GraphCandidate

PER_REQUEST_FLAG = "cli:--per-request-spec-decode-metrics"
NO_SLO = ("none", "off")
Sides = tuple[tuple[str, float, bool], ...]  # DRAFTER_ROPE_AMPLITUDE choices: (choice, amplitude, the config's own)


@dataclass(frozen=True)
class Box:
    kind: str  # "gpu" or "cpu"
    description: str
    server_start_s: float
    per_user_tok_s: float
    ttft_s: float
    preflight_s: float
    sessions_levels: tuple[int, ...]  # candidate concurrency levels (capped by MAX_NUM_SEQS)
    extra_k: tuple[int, ...]  # speculative token counts measured besides 0 and the config's own
    max_tokens: int
    turns_per_session: int
    lossless_prompts: int
    lossless_max_tokens: int
    default_budget_s: float
    source: str
    repeats: int = 1  # measured repeats per level: >= 2 gives the speedup a confidence interval
    slo: str = ""  # the default --slo (slo_source: where its numbers come from)
    slo_source: str = ""


GPU_BOX = Box(
    kind="gpu",
    description="GPU box (estimates from the recipe's 8x MI300X figures)",
    server_start_s=300.0,
    per_user_tok_s=11.3,
    ttft_s=2.0,
    preflight_s=60.0,
    sessions_levels=(1, 8, 32, 64),
    extra_k=(1, 2, 3, 4),  # k = 2-4 around any drafter's own, 1 for the advisor's fit
    max_tokens=512,
    turns_per_session=2,
    lossless_prompts=16,
    lossless_max_tokens=128,
    default_budget_s=4 * 3600.0,
    source="recipe: ~5 min model load per start on 8x MI300X; 11.3 tok/s per user (AR baseline, 90.4 tok/s at 8)",
    repeats=2,
    slo="ttft:2s,user_tps:12",
    slo_source="per-user 12 tok/s: between the recipe's autoregressive 11.3 at 8 users and a tuned autoregressive "
    "K2.5's 12.9 at 32 (issue 22); TTFT 2 s: the plan's own TTFT estimate",
)

CPU_BOX = Box(
    kind="cpu",
    description="CPU build (estimates from the demo's measured start and tok/s)",
    server_start_s=30.0,
    per_user_tok_s=85.0,
    ttft_s=0.2,
    preflight_s=30.0,
    sessions_levels=(1, 2, 4),
    extra_k=(1, 2),
    max_tokens=64,
    turns_per_session=2,
    lossless_prompts=8,
    lossless_max_tokens=48,
    default_budget_s=15 * 60.0,
    source="demo: ~30 s per --enforce-eager start; ~85 tok/s per user (benchmarks/results/demo-cpu-k*.json)",
    repeats=3,
    slo="ttft:1s,user_tps:50",
    slo_source="demo results (TTFT p95 <= 425 ms, per-user p50 >= 64 tok/s at 2-4 sessions) with headroom; "
    "a demonstration SLO, not a target",
)


def box_for(device: str) -> Box:
    return CPU_BOX if device == "cpu" else GPU_BOX


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str) -> float:
    """'90' or '90s', '15m', '2h', '1h30m' -> seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    seconds = sum(float(g) * unit for g, unit in zip(match.groups(), (3600, 60, 1)) if g) if match else 0.0
    if seconds <= 0:
        raise UserError(f"--budget {text!r}: expected a duration of more than zero, such as 20m, 2h, 1h30m or 900 (s).")
    return seconds


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    estimate_s: float
    runs: bool = True  # False: listed with the reason it does not run on this box / config
    reason: str = ""


@dataclass(frozen=True)
class QualifyPlan:
    box: Box
    budget_s: float
    spec_tokens: int  # the config's own k (the candidate)
    fp8_kv: bool
    k_values: tuple[int, ...]  # grid: 0 (reference), the candidate's k, extras the budget allows
    sessions: tuple[int, ...]
    bench_args: tuple[str, ...]
    steps: tuple[Step, ...]
    trimmed: tuple[str, ...] = field(default_factory=tuple)  # what the budget removed, in words
    slo: str = ""  # the --slo every grid benchmark gets ("": none)
    server_env: tuple[tuple[str, str], ...] = ()  # config keys set for every server (per-request metrics)
    excluded: tuple[str, ...] = ()  # grid k values a runtime rule refuses on this vLLM, with the reason
    projection: tuple[float, ...] = ()  # per-position rates for the synthetic projection (empty: none asked for)
    graph_overrides: tuple[tuple[str, str], ...] = ()  # the graph-mode candidate's config keys (empty: not measured)
    method: str = "dflash"  # the config's SPECULATIVE_METHOD: what its points serve at k >= 1
    candidates: tuple[Candidate, ...] = ()  # a shoot-out's (qualify/shootout.py): the reference is then k=0 only
    amplitudes: Sides = ()  # the drafter RoPE amplitudes to serve (qualify/amplitude.py; empty: not measured)

    @property
    def total_s(self) -> float:
        return sum(s.estimate_s for s in self.steps if s.runs)

    @property
    def within_budget(self) -> bool:
        return self.total_s <= self.budget_s

    def to_json(self) -> Json:
        return {**TypeAdapter(QualifyPlan).dump_python(self, mode="json"), "total_s": self.total_s}


@dataclass(frozen=True)
class Candidate:
    """One config of a shoot-out: its own plan, whose steps run in OUT/candidates/<name>/ against the reference."""

    name: str  # unique, file-name safe: the config's stem
    config: str  # as given
    path: str  # resolved
    same_target: bool  # the reference's model keys: the first divergence is decoded with the candidate's tokenizer
    plan: QualifyPlan


def bench_args(box: Box, slo: str = "") -> tuple[str, ...]:
    """Fixed length (ignore_eos) so tok/s compares across k; repeats for the speedup's interval."""
    fixed = ("--max-tokens", str(box.max_tokens), "--turns-per-session", str(box.turns_per_session), "--ignore-eos")
    return (
        *fixed,
        *("--warmup", "2"),
        *(("--repeats", str(box.repeats)) if box.repeats > 1 else ()),
        *(("--slo", slo) if slo else ()),
    )


def level_s(box: Box) -> float:
    """One concurrency level: every session runs its turns side by side, so a repeat takes one session's time."""
    return box.repeats * box.turns_per_session * (box.ttft_s + box.max_tokens / box.per_user_tok_s)


def point_s(box: Box, levels: int) -> float:
    """Start a server, warm it (one request's time), run the levels, stop it (~5 s)."""
    return box.server_start_s + box.max_tokens / box.per_user_tok_s + levels * level_s(box) + 5.0


def lossless_s(box: Box) -> float:
    """Greedy outputs for the shipped prompts, 8 at a time."""
    batches = -(-box.lossless_prompts // 8)
    return batches * (box.ttft_s + box.lossless_max_tokens / box.per_user_tok_s)


def sessions_for(box: Box, max_num_seqs: int) -> list[int]:
    levels = [s for s in box.sessions_levels if s <= max_num_seqs]
    return levels or [max_num_seqs]


@dataclass(frozen=True)
class PerRequest:
    """Whether the servers report per-request acceptance, and what qualify sets for it (pure decision)."""

    runs: bool
    reason: str  # why it does not run, or how it was turned on
    server_env: tuple[tuple[str, str], ...] = ()


def per_request_setting(
    values: Mapping[str, str], overrides: Collection[str], flag: tuple[str, str] = ("unknown", "not probed")
) -> PerRequest:
    """The config's value when on; off in the environment is respected; else ``summary`` when vLLM has the flag."""
    key, current = KEY.PER_REQUEST_SPEC_METRICS, typed_values(values).per_request_spec_metrics
    if current != "off":
        return PerRequest(True, f"the config's {key}={current}")
    if key in overrides:
        return PerRequest(False, f"turned off by {key}=off in the environment")
    state, evidence = flag
    if state == "present":
        return PerRequest(True, f"{key}=summary set for every server", ((key, "summary"),))
    if state == "absent":
        return PerRequest(
            False, f"the installed vLLM has no --per-request-spec-decode-metrics (added in 0.29.0; {evidence})"
        )
    return PerRequest(
        False,
        f"could not tell whether the installed vLLM has --per-request-spec-decode-metrics ({evidence}); "
        f"set {key}=summary to ask for it",
    )


def graphs_step(k: int, graphs: GraphCandidate | None, estimate_s: float) -> Step:
    title = f"graph-mode candidate (k={k}, graphs on): token identity vs the eager reference + benchmark"
    graphs = graphs or GraphCandidate(False, "not checked")
    if not graphs.runs:
        return Step("graphs", title, 0.0, False, graphs.reason)
    return Step("graphs", f"{title}; {graphs.reason}", estimate_s)


def projection_step(box: Box, rates: Sequence[float], levels: int, k_limit: tuple[int, str] | None = None) -> Step:
    """Speed, never quality (the sampler does not check drafts); GPU only: the CPU sampler raises at once."""
    title = "projection: the candidate with vLLM's synthetic acceptance sampler (speed a better drafter would give)"
    if box.kind == "cpu":
        reason = (
            "refused on the CPU build: vLLM's CPU sampler raises 'Synthetic acceptance not supported with CPU "
            "sampling' at the first request"
        )
    elif not rates:
        reason = "not asked for: --project-acceptance RATES (e.g. 0.8,0.6,0.4 per draft position) measures it"
    elif k_limit is not None and len(rates) > k_limit[0]:
        reason = f"{len(rates)} rates ask for k={len(rates)}, refused on this vLLM: {k_limit[1]}"
    else:
        title = (
            f"projection at acceptance {','.join(f'{r:g}' for r in rates)} (k={len(rates)}, tau {1 + sum(rates):.2f}): "
            "vLLM's synthetic acceptance sampler, speed only (outputs are not the model's)"
        )
        return Step("synthetic", title, point_s(box, levels))
    return Step("synthetic", title, 0.0, runs=False, reason=reason)


def amplitude_planned(box: Box, sides: Sides, reason: str) -> Step:
    """The config's own side is benchmarked on the candidate's server: only the other takes a server."""
    both = " and ".join(f"{choice} ({round(amplitude, 4)})" for choice, amplitude, _ in sides) or "legacy and engine"
    title = f"drafter RoPE amplitude: {both} on the same prompts, k and T=0 (acceptance, token identity)"
    if not sides:
        return Step("amplitude", title, 0.0, runs=False, reason=reason)
    own = sum(mine for *_, mine in sides)
    return Step("amplitude", title, (len(sides) - own) * (point_s(box, 1) + lossless_s(box)) + own * level_s(box))


def schedule_planned(box: Box, k_values: Sequence[int], levels: int, allowed: tuple[bool, str]) -> Step:
    title = "depth by load: the schedule advise chooses from this grid, served against every fixed k, judged"
    if box.repeats < 2:
        reason = "the grid measures each level once: no interval to choose a schedule by"
    elif len([k for k in k_values if k]) < 2:
        reason = "the grid measures one k >= 1: nothing to schedule"
    elif allowed[0]:
        return Step("schedule", title, point_s(box, levels) + lossless_s(box))
    else:
        reason = allowed[1]
    return Step("schedule", title, 0.0, runs=False, reason=reason)


def planned_steps(
    box: Box,
    k: int,
    fp8: bool,
    k_values: Sequence[int],
    sessions: Sequence[int],
    slo: str = "",
    per_request: PerRequest | None = None,
    projection: Sequence[float] = (),
    k_limit: tuple[int, str] | None = None,
    graphs: GraphCandidate | None = None,
    amplitude: tuple[Sides, str] = ((), "not probed"),
    schedule: tuple[bool, str] = (False, "not checked"),
) -> tuple[Step, ...]:
    per_request = per_request or PerRequest(False, "not probed")
    served = point_s(box, len(sessions)) + lossless_s(box)
    grid_points = len([v for v in k_values if v not in (0, k)])
    at_slo = f" ({describe(parse_slo(slo))})" if slo else ""
    goodput = f"goodput at the SLO{at_slo}, speedup at the SLO and at matched concurrency"
    grid = f"k x concurrency grid: {grid_points} more server(s) x sessions {','.join(map(str, sessions))}, each judged"
    fp8_s = box.server_start_s + 3 * lossless_s(box) + 5.0 if fp8 else 0.0
    fp8_title = "FP8 KV validation: a BF16-KV server's outputs and math vs the FP8 reference's"
    preflight = "preflight: machine checks, vLLM compatibility + runtime rules (stops the run on FAIL)"
    per_request_title = "per-request acceptance by turn and prompt length (metrics.speculative_decoding on each reply)"
    return (
        Step("environment", "capture host, accelerators, NUMA, versions, config and plan", 5.0),
        Step("preflight", preflight, box.preflight_s),
        Step("reference", "reference server (SPECULATIVE_METHOD=none): greedy outputs + benchmark k=0", served),
        Step("candidate", f"candidate server (k={k}): greedy outputs, token identity vs reference + benchmark", served),
        amplitude_planned(box, *amplitude),
        Step("fp8", fp8_title, fp8_s, fp8, "" if fp8 else "KV cache is not FP8"),
        Step("grid", grid, grid_points * served),
        schedule_planned(box, k_values, len(sessions), schedule),
        graphs_step(k, graphs, served),
        Step("acceptance", "acceptance by position (Prometheus counters per grid point)", 1.0),
        Step("per_request", per_request_title, 1.0, per_request.runs, "" if per_request.runs else per_request.reason),
        Step("goodput", goodput, 1.0, bool(slo), "" if slo else "--slo none: no SLO measured"),
        Step("advisor", "the advisor's k recommendation per concurrency", 2.0),
        projection_step(box, projection, len(sessions), k_limit),
        Step("report", "report.md, plots, result files, environment.json, archive", 10.0),
    )


def check_slo(text: str | None, box: Box) -> str:
    """``--slo`` as given (None: the box's default; none/off: no SLO), validated; UserError names the form."""
    if text is None:
        return box.slo
    if text.strip().lower() in NO_SLO:
        return ""
    try:
        parse_slo(text)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return text.strip()


def build_plan(
    values: Mapping[str, str],
    budget_s: float | None = None,
    slo: str | None = None,
    per_request: PerRequest | None = None,
    k_limit: tuple[int, str] | None = None,
    projection: Sequence[float] = (),
    graphs: GraphCandidate | None = None,
    extra_k: Sequence[int] | None = None,
    sessions_levels: Sequence[int] | None = None,
    amplitude: tuple[Sides, str] = ((), "not probed"),
    schedule: tuple[bool, str] = (False, "not checked"),
) -> QualifyPlan:
    """Trimmed to the budget in docs/qualify.md's order, never the reference or the top-level candidate; ``k_limit``:
    (largest k, why) a runtime rule allows; the rest are a shoot-out's choices and the probes' findings."""
    typed = typed_values(values)
    if typed.speculative_method == "none":
        raise UserError(
            "qualify needs a speculative config (SPECULATIVE_METHOD=dflash, eagle3 or dspark): it compares the "
            "config with itself without speculation; this one has none."
        )
    if rates := typed.synthetic_acceptance_rates:
        raise UserError(
            f"{KEY.SYNTHETIC_ACCEPTANCE_RATES} is set: that candidate accepts drafts without checking them, so it "
            f"cannot be qualified; unset it and pass --project-acceptance {rates} to measure the projection beside "
            "the real drafter."
        )
    box = box_for(typed.device)
    budget = box.default_budget_s if budget_s is None else budget_s
    slo_text = check_slo(slo, box)
    per_request = per_request or PerRequest(False, "not probed")
    k, fp8 = typed.num_speculative_tokens, typed.kv_cache_dtype.startswith("fp8")  # k >= 1: the schema's minimum
    extras = [e for e in (box.extra_k if extra_k is None else extra_k) if e != k and (not k_limit or e <= k_limit[0])]
    excluded = tuple(f"k={e} ({k_limit[1]})" for e in box.extra_k if k_limit is not None and e > k_limit[0])
    sessions = list(sessions_levels or sessions_for(box, typed.max_num_seqs))
    trimmed: list[str] = []
    graph, scheduled = graphs, schedule

    def make() -> QualifyPlan:
        k_values = (0, k, *extras)
        steps = planned_steps(
            box, k, fp8, k_values, sessions, slo_text, per_request, projection, k_limit, graph, amplitude, scheduled
        )
        projects = next(step for step in steps if step.name == "synthetic").runs
        return QualifyPlan(
            box=box,
            budget_s=budget,
            spec_tokens=k,
            fp8_kv=fp8,
            k_values=k_values,
            sessions=tuple(sessions),
            bench_args=bench_args(box, slo_text),
            steps=steps,
            trimmed=tuple(trimmed),
            slo=slo_text,
            server_env=per_request.server_env,
            excluded=excluded,
            projection=tuple(projection) if projects else (),
            graph_overrides=graph.overrides if graph and graph.runs else (),
            method=typed.speculative_method,
            amplitudes=amplitude[0],
        )

    def drop_schedule() -> str | None:
        nonlocal scheduled
        if not next(s for s in make().steps if s.name == "schedule").runs:
            return None
        scheduled = (False, "trimmed to fit the budget")
        return "the schedule"

    def drop_graphs() -> str | None:
        nonlocal graph
        if graph is None or not graph.runs:
            return None
        graph = GraphCandidate(False, "trimmed to fit the budget")
        return "the graph-mode candidate"

    def drop_extra_k() -> str | None:
        return f"k={extras.pop()}" if extras else None

    return fit_budget(make, trimmed, (drop_schedule, drop_extra_k, drop_graphs, fewer_sessions(sessions)))


Trim = Callable[[], str | None]  # drops one thing from a plan and names it, or finds nothing to drop


def fewer_sessions(sessions: list[int]) -> Trim:
    """The last trim of every plan: the lowest concurrency level, while more than one is left."""
    return lambda: f"{sessions.pop(0)} sessions" if len(sessions) > 1 else None


def fit_budget(make: Callable[[], QualifyPlan], trimmed: list[str], trims: Sequence[Trim]) -> QualifyPlan:
    """Rebuild the plan after each trim that drops something, until it fits or none is left; ``trimmed`` names them."""
    plan = make()
    while not plan.within_budget:
        dropped = next((label for trim in trims if (label := trim()) is not None), None)
        if dropped is None:
            break
        trimmed.append(dropped)
        plan = make()
    return plan


def render(plan: QualifyPlan, config: str, statuses: Mapping[str, str] | None = None) -> list[str]:
    statuses = statuses or {}
    lines = [
        f"qualify {config} on a {plan.box.description}",
        f"  estimates: {plan.box.source}",
        f"  grid: k in {{{', '.join(map(str, plan.k_values))}}} x sessions {{{', '.join(map(str, plan.sessions))}}}"
        f"; benchmark {' '.join(plan.bench_args)}",
    ]
    if plan.slo:
        origin = plan.box.slo_source if plan.slo == plan.box.slo else "given with --slo"
        lines.append(f"  SLO: {describe(parse_slo(plan.slo))} ({origin})")
    if plan.server_env:
        lines.append(f"  every server: {' '.join(f'{k}={v}' for k, v in plan.server_env)}")
    if plan.excluded:
        lines.append(f"  left out by the runtime rules: {', '.join(plan.excluded)}")
    for c in plan.candidates:
        ks = ", ".join(map(str, c.plan.k_values[1:]))
        lines.append(f"  candidate {c.name} ({c.config}): SPECULATIVE_METHOD={c.plan.method}, k in {{{ks}}}")
    if plan.trimmed:
        lines.append(f"  trimmed to fit the budget: {', '.join(plan.trimmed)}")
    width = max(11, *(len(step.name) for step in plan.steps))
    for index, step in enumerate(plan.steps, start=1):
        estimate = format_duration(step.estimate_s) if step.runs else "-"
        status = statuses.get(step.name, "to run" if step.runs else "skipped")
        note = f"  [{step.reason}]" if step.reason else ""
        lines.append(f"  [{index:>2}] {step.name:<{width}} {estimate:>7}  {status:<8} {step.title}{note}")
    verdict = "within" if plan.within_budget else "OVER"
    lines.append(
        f"total {format_duration(plan.total_s)} estimated, {verdict} the budget of {format_duration(plan.budget_s)}"
    )
    return lines
