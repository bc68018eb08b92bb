"""The report's sections from the benchmark's newer measures (pure: documents in, Markdown lines out)."""

from __future__ import annotations

from collections.abc import Sequence

from kimi_dflash.bench.columns import ACCEPTANCE_LENGTH, ACCEPTANCE_RATE, OUTPUT_GOODPUT, OUTPUT_TOK_S, SLO_ATTAINMENT
from kimi_dflash.core.formatting import MISSING, general, interval, markdown_table, percent, ratio
from kimi_dflash.qualify import documents

LIMITS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2el_s": "E2EL", "user_tok_s": "per-user tok/s"}
tau, alpha, tok_s = ACCEPTANCE_LENGTH.fmt, ACCEPTANCE_RATE.fmt, OUTPUT_TOK_S.fmt  # as the level tables show them
SPREAD = "τ pooled | τ per request: min / p50 / p90 / max | α pooled"


def _table(header: str, align: str, rows: Sequence[Sequence[str | int]]) -> list[str]:
    """``header``: the column titles as the Markdown header row writes them."""
    return markdown_table(header.split(" | "), align, rows)


def reply_identity_lines(rows: Sequence[documents.ReplyIdentityRow]) -> list[str]:
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


def _spread(g: documents.Group) -> list[str]:
    """τ pooled, then τ per request min / p50 / p90 / max."""
    return [tau(g.tau), " / ".join(tau(getattr(g, key)) for key in ("tau_min", "tau_p50", "tau_p90", "tau_max"))]


def per_request_section(doc: documents.PerRequest | None, candidate_k: int, why_not: str) -> list[str]:
    if not doc or not doc.rows:
        return [f"*(not measured: {why_not})*"]
    rows = sorted(doc.rows, key=lambda r: (r.k, r.sessions))
    table = []
    for r in rows:
        t, counted = r.total, r.counter_accepted
        check = "yes" if t.accepted == counted else f"no ({t.accepted} vs {counted})"
        check = MISSING if counted is None else check
        table.append([r.k, r.sessions, t.requests, *_spread(t), alpha(t.alpha), check])
    lines = [
        "From each reply's own `metrics.speculative_decoding` (vLLM `--per-request-spec-decode-metrics`). "
        "τ = 1 + accepted / verify steps (tokens per step, the bonus token included), α = accepted / drafted; "
        "*pooled* divides the group's sums, the per-request figures are the spread over its requests. The last "
        "column checks the per-request sums against the /metrics counter deltas of the same window.",
        "",
        *_table(f"k | sessions | requests | {SPREAD} | Σ accepted = /metrics Δ", "rrrrlrl", table),
    ]
    mine = [r for r in rows if r.k == candidate_k] or [r for r in rows if r.k == rows[-1].k]
    k = mine[0].k
    groups = [
        ("by turn (the conversation grows turn over turn)", "per_turn", "turn {}"),
        ("by prompt length (usage.prompt_tokens)", "per_prompt_length", "{} tokens"),
    ]
    if {g.key for r in mine for g in r.per_category} - {"uncategorized"}:
        groups.append(("by prompt category", "per_category", "{}"))
    header = f"sessions | group | requests | verify steps | {SPREAD} | α per request p50"
    for title, key, label in groups:
        table = [
            [r.sessions, label.format(g.key), g.requests, g.steps, *_spread(g), alpha(g.alpha), alpha(g.alpha_p50)]
            for r in mine
            for g in getattr(r, key)
        ]
        lines += ["", f"Candidate k={k}, {title}:", "", *_table(header, "rlrrrlrr", table)]
    return lines


def matched_speedup_section(doc: documents.Goodput | None, why_not: str) -> list[str]:
    rows = doc.matched if doc else []
    if not rows:
        return [f"*(not computed: {why_not})*"]
    significant = {True: "yes", False: "**no**", None: "— (needs ≥ 2 repeats)"}
    table = [
        [
            r.sessions,
            r.k,
            ratio(r.speedup),
            interval(r.low, r.high),
            significant[r.significant],
            "{} / {}".format(*r.repeats),
        ]
        for r in sorted(rows, key=lambda r: (r.sessions, r.k))
    ]
    return [
        f"Output tok/s of each speculative point over the reference's at the same concurrency, with its "
        f"{percent(rows[0].confidence, 0)} interval over repeats (delta method on the log ratio, Welch df; "
        "docs/benchmark.md). **Not significant** when the interval contains 1.0: the difference is inside this box's "
        "run-to-run noise. The speedup here is the ratio of the per-repeat means; the table above divides pooled "
        "windows, so one disturbed repeat moves the two apart (and widens the interval).",
        "",
        *_table("sessions | k | speedup | interval | significant | repeats (k / ref)", "rrrlll", table),
    ]


def goodput_section(doc: documents.Goodput | None, why_not: str) -> list[str]:
    if not doc or not doc.rows:
        return [f"*(not measured: {why_not})*"]
    attainment, goodput = SLO_ATTAINMENT, OUTPUT_GOODPUT
    by_level = []
    for r in sorted(doc.rows, key=lambda r: (r.k, r.sessions)):
        misses = ", ".join(f"{LIMITS.get(key, key)} {n}" for key, n in r.violations.items() if n) or "none"
        cells = [attainment.fmt(r.attainment), f"{r.met} / {r.requests}", goodput.fmt(r.output_goodput)]
        by_level.append([r.k, r.sessions, *cells, tok_s(r.output_tok_s), misses])
    at_slo = []
    for r in doc.at_slo:
        sessions = "none" if r.sustained_sessions is None else r.sustained_sessions
        speedup = "— (a side sustains no measured concurrency)" if r.speedup is None else ratio(r.speedup)
        speedup = "(reference)" if r.k == 0 else speedup
        at_slo.append([r.k, sessions, attainment.fmt(r.attainment), goodput.fmt(r.output_goodput), speedup])
    headers = f"{attainment.header} | met / judged | {goodput.header} | {OUTPUT_TOK_S.header}"
    sustained = f"k | sustained sessions | {attainment.header} | {goodput.header} | speedup at the SLO vs k=0"
    return [
        f"SLO: **{doc.slo_text}** per request ({doc.slo_source}). Attainment = requests meeting every limit / "
        "requests judged; goodput = output tokens of those requests / the measured window. A concurrency is "
        f"*sustained* when at least {percent(doc.threshold, 0)} of its requests meet the SLO.",
        "",
        *_table(f"k | sessions | {headers} | misses by limit", "rrrrrrl", by_level),
        "",
        "**Speedup at the SLO**: each point's goodput at its highest sustained concurrency over the reference's at "
        "the reference's own (the two may differ: that is the point). Only measured concurrencies count.",
        "",
        *_table(sustained, "rrrrr", at_slo),
    ]


def projection_section(doc: documents.Projection | None, why_not: str) -> list[str]:
    if not doc or not doc.rows:
        return [f"*(not measured: {why_not})*"]
    rates = ", ".join(map(general, doc.rates))
    header = (
        "sessions | projected tok/s | per-user tok/s p50 | τ asked / counted | reference tok/s | projected speedup"
        " | measured candidate tok/s | measured speedup"
    )
    table = [
        [
            r.sessions,
            tok_s(r.output_tok_s),
            tok_s(r.per_user_tok_s_p50),
            f"{tau(r.tau_expected)} / {tau(r.tau_measured)}",
            tok_s(r.reference_tok_s),
            ratio(r.speedup),
            tok_s(r.candidate_tok_s),
            ratio(r.candidate_speedup),
        ]
        for r in sorted(doc.rows, key=lambda r: r.sessions)
    ]
    return [
        f"**A projection of speed, not of quality.** The candidate was served with k={doc.k} and vLLM's synthetic "
        f"rejection sampler accepting draft positions 1..{doc.k} at {rates} (unconditional rates), without checking "
        "the drafts against the target: its outputs are not the model's, and nothing here is a lossless or accuracy "
        "result. It answers one question: the tok/s a drafter with these acceptance rates would give on this box. "
        f"Raw result: `{doc.result}`.",
        "",
        *_table(header, "rrrlrrrr", table),
        "",
        "τ counted is the server's own acceptance length in this run; it matches τ asked when the sampler did what was "
        "asked (a difference of a few percent is sampling noise over the level's verify steps).",
    ]


def graphs_section(doc: documents.Graphs | None, why_not: str) -> list[str]:
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
    header = (
        "sessions | graphs tok/s | per-user tok/s p50 | τ graphs / eager | eager candidate tok/s | vs eager"
        " | reference tok/s | vs reference"
    )
    table = [
        [
            r.sessions,
            tok_s(r.output_tok_s),
            tok_s(r.per_user_tok_s_p50),
            f"{tau(r.tau)} / {tau(r.eager_tau)}",
            tok_s(r.eager_tok_s),
            ratio(r.speedup_vs_eager),
            tok_s(r.reference_tok_s),
            ratio(r.speedup_vs_reference),
        ]
        for r in sorted(doc.rows, key=lambda r: r.sessions)
    ]
    return [*lines, "", *_table(header, "rrrlrrrr", table)]


def ranking_section(doc: documents.Shootout | None, why_not: str) -> list[str]:
    """A shoot-out's candidates ranked at the matched concurrency; one that is not lossless is listed, never ranked."""
    if not doc or not doc.rows:
        return [f"*(not ranked: {why_not})*"]
    header = (
        f"rank | candidate | method | k | lossless | {OUTPUT_GOODPUT.header} | {OUTPUT_TOK_S.header}"
        " | speedup vs k=0 (interval) | τ | acceptance by position | advisor's k | note"
    )
    table = [
        [
            r.rank or "—",
            f"`{r.config}`",
            r.method,
            r.k,
            r.lossless,
            OUTPUT_GOODPUT.fmt(r.output_goodput),
            tok_s(r.output_tok_s),
            f"{ratio(r.speedup.speedup)} ({interval(r.speedup.low, r.speedup.high)})" if r.speedup else MISSING,
            tau(r.tau),
            " / ".join(map(alpha, r.per_position)) or MISSING,
            MISSING if r.advisor_k is None else r.advisor_k,
            r.note,
        ]
        for r in doc.rows
    ]
    return [
        f"Each candidate at its own k; {doc.ranked_by}. The speedup is its output tok/s over the reference's "
        "(the CONFIG without speculation) at that concurrency, with its 95 % interval over repeats; the advisor's k "
        "is what it recommends for that drafter there. Its own sections below hold every level.",
        "",
        *_table(header, "rllrlrrlllll", table),
    ]
