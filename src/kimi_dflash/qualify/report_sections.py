"""The report's sections from the benchmark's newer measures (pure: the step files' documents in, Markdown lines
out): served-reply identity beside the lossless verdict, per-request acceptance by turn and prompt length, the
speedup at matched concurrency with its interval, goodput and the speedup at the SLO."""

from __future__ import annotations

from collections.abc import Sequence

from kimi_dflash.qualify.documents import Goodput, Graphs, Group, PerRequest, Projection, ReplyIdentityRow

LIMITS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2el_s": "E2EL", "user_tok_s": "per-user tok/s"}


def _f(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "—" if value is None else f"{value:.{digits}f}{suffix}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f} %"


def reply_identity_lines(rows: Sequence[ReplyIdentityRow]) -> list[str]:
    """One Verdicts line per speculative point: benchmark replies identical to the reference's (T=0)."""
    if not rows:
        return []
    lines = []
    for k in sorted({r.k for r in rows}):
        mine = [r for r in rows if r.k == k]
        compared, identical = sum(r.compared for r in mine), sum(r.identical for r in mine)
        levels = ", ".join(str(r.sessions) for r in mine)
        differing = [r for r in mine if r.first_difference]
        first = f"{differing[0].sessions} sessions, reply {differing[0].first_difference}" if differing else None
        tail = f"; first difference at {first} (repeat/session/request, from 0)" if first else ""
        lines.append(f"  - k={k}: **{identical}/{compared}** identical (sessions {levels}){tail}")
    return [
        "- served replies identical to the reference's at T=0 (the benchmark's sha256 per reply, matched "
        "conversations; in-band evidence beside the token identity above, not a verdict: at bf16 a near-tie "
        "can flip a token under another batch):",
        *lines,
    ]


def _group_row(label: str, sessions: int, g: Group) -> str:
    return (
        f"| {sessions} | {label} | {g.requests} | {g.steps} | {_f(g.tau)} "
        f"| {_f(g.tau_min)} / {_f(g.tau_p50)} / {_f(g.tau_p90)} / {_f(g.tau_max)} "
        f"| {_pct(g.alpha)} | {_pct(g.alpha_p50)} |"
    )


GROUP_HEAD = [
    "| sessions | group | requests | verify steps | τ pooled | τ per request: min / p50 / p90 / max | α pooled "
    "| α per request p50 |",
    "|---:|---|---:|---:|---:|---|---:|---:|",
]


def per_request_section(doc: PerRequest | None, candidate_k: int, why_not: str) -> list[str]:
    if not doc or not doc.rows:
        return [f"*(not measured: {why_not})*"]
    rows = sorted(doc.rows, key=lambda r: (r.k, r.sessions))
    lines = [
        "From each reply's own `metrics.speculative_decoding` (vLLM `--per-request-spec-decode-metrics`). "
        "τ = 1 + accepted / verify steps (tokens per step, the bonus token included), α = accepted / drafted; "
        "*pooled* divides the group's sums, the per-request figures are the spread over its requests. The last "
        "column checks the per-request sums against the /metrics counter deltas of the same window.",
        "",
        "| k | sessions | requests | τ pooled | τ per request: min / p50 / p90 / max | α pooled "
        "| Σ accepted = /metrics Δ |",
        "|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in rows:
        t = r.total
        counted = r.counter_accepted
        check = "—" if counted is None else "yes" if t.accepted == counted else f"no ({t.accepted} vs {counted})"
        lines.append(
            f"| {r.k} | {r.sessions} | {t.requests} | {_f(t.tau)} "
            f"| {_f(t.tau_min)} / {_f(t.tau_p50)} / {_f(t.tau_p90)} / {_f(t.tau_max)} "
            f"| {_pct(t.alpha)} | {check} |"
        )
    mine = [r for r in rows if r.k == candidate_k] or [r for r in rows if r.k == rows[-1].k]
    k = mine[0].k
    for title, label, groups in (
        ("by turn (the conversation grows turn over turn)", "turn {}", [(r, r.per_turn) for r in mine]),
        ("by prompt length (usage.prompt_tokens)", "{} tokens", [(r, r.per_prompt_length) for r in mine]),
    ):
        lines += ["", f"Candidate k={k}, {title}:", "", *GROUP_HEAD]
        for r, found in groups:
            lines += [_group_row(label.format(g.key), r.sessions, g) for g in found]
    categories = {g.key for r in mine for g in r.per_category}
    if categories - {"uncategorized"}:
        lines += ["", f"Candidate k={k}, by prompt category:", "", *GROUP_HEAD]
        for r in mine:
            lines += [_group_row(g.key, r.sessions, g) for g in r.per_category]
    return lines


def matched_speedup_section(doc: Goodput | None, why_not: str) -> list[str]:
    rows = doc.matched if doc else []
    if not rows:
        return [f"*(not computed: {why_not})*"]
    confidence = rows[0].confidence
    lines = [
        f"Output tok/s of each speculative point over the reference's at the same concurrency, with its "
        f"{confidence * 100:.0f} % interval over repeats (delta method on the log ratio, Welch df; docs/benchmark.md). "
        "**Not significant** when the interval contains 1.0: the difference is inside this box's run-to-run noise. "
        "The speedup here is the ratio of the per-repeat means; the table above divides pooled windows, so one "
        "disturbed repeat moves the two apart (and widens the interval).",
        "",
        "| sessions | k | speedup | interval | significant | repeats (k / ref) |",
        "|---:|---:|---:|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r.sessions, r.k)):
        interval = "—" if r.low is None or r.high is None else f"[{r.low:.2f}, {r.high:.2f}]"
        significant = {True: "yes", False: "**no**", None: "— (needs ≥ 2 repeats)"}[r.significant]
        lines.append(
            f"| {r.sessions} | {r.k} | {_f(r.speedup)}x | {interval} | {significant} "
            f"| {r.repeats[0]} / {r.repeats[1]} |"
        )
    return lines


def goodput_section(doc: Goodput | None, why_not: str) -> list[str]:
    if not doc or not doc.rows:
        return [f"*(not measured: {why_not})*"]
    threshold = doc.threshold
    lines = [
        f"SLO: **{doc.slo_text}** per request ({doc.slo_source}). Attainment = requests meeting every limit / "
        "requests judged; goodput = output tokens of those requests / the measured window. A concurrency is "
        f"*sustained* when at least {threshold * 100:.0f} % of its requests meet the SLO.",
        "",
        "| k | sessions | attainment | met / judged | goodput tok/s | output tok/s | misses by limit |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(doc.rows, key=lambda r: (r.k, r.sessions)):
        misses = ", ".join(f"{LIMITS.get(key, key)} {n}" for key, n in r.violations.items() if n) or "none"
        lines.append(
            f"| {r.k} | {r.sessions} | {_pct(r.attainment)} | {r.met} / {r.requests} "
            f"| {_f(r.output_goodput, 1)} | {_f(r.output_tok_s, 1)} | {misses} |"
        )
    lines += [
        "",
        "**Speedup at the SLO**: each point's goodput at its highest sustained concurrency over the reference's at "
        "the reference's own (the two may differ: that is the point). Only measured concurrencies count.",
        "",
        "| k | sustained sessions | attainment | goodput tok/s | speedup at the SLO vs k=0 |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in doc.at_slo:
        sessions = "none" if r.sustained_sessions is None else str(r.sustained_sessions)
        if r.k == 0:
            speedup = "(reference)"
        elif r.speedup is None:
            speedup = "— (a side sustains no measured concurrency)"
        else:
            speedup = _f(r.speedup, 2, "x")
        lines.append(f"| {r.k} | {sessions} | {_pct(r.attainment)} | {_f(r.output_goodput, 1)} | {speedup} |")
    return lines


def projection_section(doc: Projection | None, why_not: str) -> list[str]:
    """The synthetic-acceptance projection, labelled as what it is, beside the measured candidate."""
    if not doc or not doc.rows:
        return [f"*(not measured: {why_not})*"]
    rates = ", ".join(f"{r:g}" for r in doc.rates)
    lines = [
        f"**A projection of speed, not of quality.** The candidate was served with k={doc.k} and vLLM's synthetic "
        f"rejection sampler accepting draft positions 1..{doc.k} at {rates} (unconditional rates), without checking "
        "the drafts against the target: its outputs are not the model's, and nothing here is a lossless or accuracy "
        "result. It answers one question: the tok/s a drafter with these acceptance rates would give on this box. "
        f"Raw result: `{doc.result}`.",
        "",
        "| sessions | projected tok/s | per-user tok/s p50 | τ asked / counted | reference tok/s | projected speedup "
        "| measured candidate tok/s | measured speedup |",
        "|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.sessions} | {_f(r.output_tok_s)} | {_f(r.per_user_tok_s_p50)} "
        f"| {_f(r.tau_expected)} / {_f(r.tau_measured)} | {_f(r.reference_tok_s)} "
        f"| {_f(r.speedup, 2, 'x')} | {_f(r.candidate_tok_s)} | {_f(r.candidate_speedup, 2, 'x')} |"
        for r in sorted(doc.rows, key=lambda r: r.sessions)
    ]
    lines += [
        "",
        "τ counted is the server's own acceptance length in this run; it matches τ asked when the sampler did what was "
        "asked (a difference of a few percent is sampling noise over the level's verify steps).",
    ]
    return lines


def graphs_section(doc: Graphs | None, why_not: str) -> list[str]:
    """The graph-mode candidate beside the eager one: the mode the server ended with, token identity as evidence, and
    tok/s at equal concurrency."""
    if not doc:
        return [f"*(not measured: {why_not})*"]
    keys = " ".join(f"`{key}={value}`" for key, value in doc.overrides)
    mode = doc.cudagraph_mode or "not found in the server log"
    lines = [f"The candidate served again with {keys}.", ""]
    if doc.downgraded:
        lines.append(
            f"- cudagraph mode: **{mode}, lowered by vLLM after start-up** (vllm #49547: an attention backend cannot "
            "serve FULL graphs for the verify batch; nothing fails, decode is slower). Log: "
            f"`{doc.mode_evidence}`"
        )
    else:
        lines.append(f"- cudagraph mode the server ended with: **{mode}**")
    identity = doc.identity
    if identity:
        lines.append(
            f"- greedy outputs identical to the eager reference's: **{identity.identical}/{identity.prompts}** "
            "(evidence, not a verdict: graphs run the target through other kernels and batch shapes, so a difference "
            "can be the target's numerics; the lossless verdict above is the eager candidate's)"
        )
    else:
        lines.append("- greedy outputs: not compared (see the graphs step's detail)")
    if not doc.rows:
        return [*lines, "", "*(no benchmark result: see the graphs step's detail)*"]
    lines += [
        "",
        "| sessions | graphs tok/s | per-user tok/s p50 | τ graphs / eager | eager candidate tok/s | vs eager "
        "| reference tok/s | vs reference |",
        "|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.sessions} | {_f(r.output_tok_s)} | {_f(r.per_user_tok_s_p50)} "
        f"| {_f(r.tau)} / {_f(r.eager_tau)} | {_f(r.eager_tok_s)} | {_f(r.speedup_vs_eager, 2, 'x')} "
        f"| {_f(r.reference_tok_s)} | {_f(r.speedup_vs_reference, 2, 'x')} |"
        for r in sorted(doc.rows, key=lambda r: r.sessions)
    ]
    return lines
