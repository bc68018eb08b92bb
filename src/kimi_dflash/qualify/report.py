"""OUT/report.md: verdicts first (lossless, FP8 accuracy, recommended settings), then the tables (acceptance by
position, the matched-concurrency table, the recipe's published MI300X figures beside ours), then each step's
status. Verdicts and the exit code are pure functions of the state and the step files.

Exit codes: 0 every verdict passed; 2 a verdict failed (lossless FAIL, or FP8 KV FAIL); 1 the box could not be
qualified (preflight failed, a server did not start or could not be stopped, a step needed for a verdict failed,
bad arguments).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.bench import columns
from kimi_dflash.core.formatting import general, markdown_table, number, percent, ratio
from kimi_dflash.fp8.validate import Fp8Summary
from kimi_dflash.qualify import figures, measures, report_sections
from kimi_dflash.qualify.documents import Acceptance, Advisor, Goodput, Graphs, PerRequest, Projection
from kimi_dflash.qualify.documents import ReplyIdentityRow as ReplyRow
from kimi_dflash.qualify.environment import Environment
from kimi_dflash.qualify.lossless import LosslessVerdict
from kimi_dflash.qualify.plan import SPEC_TOKENS
from kimi_dflash.qualify.state import FAILED, QualifyState
from kimi_dflash.results_doc import ReportedFigures, recipe_figures
from kimi_dflash.sweep import aggregate

EXIT_PASS, EXIT_INFRA, EXIT_VERDICT_FAIL = 0, 1, 2
NOT_RUN = "NOT RUN"


@dataclass(frozen=True)
class Verdict:
    name: str
    status: str  # PASS, WARN, FAIL, NOT RUN
    detail: str


def verdicts(out: Path, state: QualifyState) -> list[Verdict]:
    found = []
    lossless = LosslessVerdict.load_or_none(out / "lossless" / "verdict.json")
    if lossless is None:
        why = state.steps["candidate"].detail if "candidate" in state.steps else "the candidate step did not run"
        found.append(Verdict("lossless (T=0 token identity)", NOT_RUN, why))
    else:
        agreement = lossless.agreement
        detail = (f"{agreement.identical}/{agreement.prompts} outputs token-identical to the reference (up to "
                  f"{lossless.max_tokens} tokens each)")  # fmt: skip
        found.append(Verdict("lossless (T=0 token identity)", lossless.verdict, detail))
    if state.plan.fp8_kv:
        fp8 = Fp8Summary.load_or_none(out / "fp8.json")
        if fp8 is None:
            found.append(Verdict("FP8 KV accuracy", NOT_RUN, state.steps["fp8"].detail if "fp8" in state.steps else ""))
        else:
            detail = "; ".join(fp8.reasons) or f"math {percent(fp8.math_fp8)} vs BF16 {percent(fp8.math_bf16)}"
            found.append(Verdict("FP8 KV accuracy", fp8.verdict, detail))
    return found


def exit_code(found: Sequence[Verdict], state: QualifyState) -> int:
    if state.server_left:  # the run was cut short, and a server of it may still hold the box
        return EXIT_INFRA
    if any(v.status == "FAIL" for v in found):
        return EXIT_VERDICT_FAIL
    failed_steps = [name for name, record in state.steps.items() if record.status == FAILED]
    if any(v.status == NOT_RUN for v in found) or failed_steps:
        return EXIT_INFRA
    return EXIT_PASS


def _divergence_lines(out: Path) -> list[str]:
    lossless = LosslessVerdict.load_or_none(out / "lossless" / "verdict.json")
    d = lossless.first_divergence if lossless else None
    if d is None:
        return []
    prompt = d.prompt.replace("\n", " ")[:80]
    return [
        "",
        f"First divergence: prompt {d.prompt_index} ({prompt!r}), output token {d.position} "
        f"(text decoded with {d.decoded_with}):",
        "",
        f"- after: `{d.shared_text}`" if d.shared_text is not None else "- after: (other tokenizer)",
        f"- reference: `{d.reference_text}` ids {d.reference_ids}"
        if d.reference_text is not None
        else f"- reference: ids {d.reference_ids} (another tokenizer: not decoded)",
        f"- candidate: `{d.candidate_text}` ids {d.candidate_ids}",
    ]


def _recommendation_lines(out: Path) -> list[str]:
    advisor = Advisor.load_or_none(out / "advisor.json")
    if not advisor:
        return ["- recommended settings: none (the advisor did not run; see the steps below)"]
    lines = [
        "- recommended `NUM_SPECULATIVE_TOKENS` per concurrency (the advisor; measured where marked, "
        "predicted elsewhere):"
    ]
    for sessions, rec in advisor.recommendations.items():
        source = "measured" if rec.measured else "predicted"
        lines.append(
            f"  - {sessions} sessions: **k={rec.k}** — {number(rec.output_tok_s)} tok/s aggregate, "
            f"{number(rec.per_user_tok_s)} per user ({source})"
        )
    if not advisor.per_position:  # the model was not fitted: only the measured k were compared
        lines += [f"  - note: {line}" for line in advisor.lines]
    return lines


def _acceptance_table(doc: Acceptance | None) -> list[str]:
    if not doc or not doc.rows:
        return ["*(no acceptance counters: no speculative point finished)*"]
    rows = sorted(doc.rows, key=lambda r: (r.k, r.sessions))
    width = max(len(r.per_position) for r in rows)
    rate, tau = columns.ACCEPTANCE_RATE, columns.ACCEPTANCE_LENGTH
    header = ["k", "sessions", *(f"pos {i + 1}" for i in range(width)), rate.header, tau.header]
    table = [[r.k, r.sessions, *map(rate.fmt, r.per_position), *[""] * (width - len(r.per_position)),
              rate.fmt(r.acceptance_rate), tau.fmt(r.acceptance_length)] for r in rows]  # fmt: skip
    return markdown_table(header, "r" * len(header), table)


def _recipe_table(recipe: ReportedFigures, cells: Sequence[aggregate.Cell], device: str) -> list[str]:
    rows = []
    for row in recipe.rows:
        k, sessions = row.spec_tokens, row.sessions
        match = next((c for c in cells if c.sessions == sessions and c.overrides.get(SPEC_TOKENS) == str(k)), None)
        measured = match.cell(columns.OUTPUT_TOK_S) if match else "not measured at this k and concurrency"
        speedup = ratio(match.output_tok_s / row.output_tok_s if match else None)
        rows.append([f"`{row.config}`", row.kv_cache, k, sessions, general(row.output_tok_s), measured, speedup])
    header = ["config", "KV", "k", "sessions", "recipe tok/s (reported)", "this box tok/s (measured)", "ratio"]
    return [
        f"Reported by {recipe.source} on {recipe.hardware} — **not measured by this project**. Measured "
        f"here: this run on this box ({device}). A row is compared only where this run measured the same k at "
        "the same concurrency.",
        "",
        *markdown_table(header, "llrrrrr", rows),
    ]


def _why_not(state: QualifyState, step: str) -> str:
    """Why a step's file is missing: its recorded detail, or the plan's reason it does not run."""
    record = state.steps.get(step)
    if record is not None and record.detail:
        return f"{step} step {record.status}: {record.detail}"
    planned = next((s for s in state.plan.steps if s.name == step), None)
    if planned and planned.reason:
        return planned.reason
    return f"the {step} step did not run"


def render(
    out: Path,
    state: QualifyState,
    found: Sequence[Verdict],
    cells: Sequence[aggregate.Cell],
    plots: Sequence[Path],
    config: str,
    replies: Sequence[ReplyRow] = (),
) -> str:
    env = Environment.load_or_none(out / "environment.json")
    device, versions = "?, ?", ""
    if env is not None:
        device = f"{env.host.hostname}, {', '.join(env.accelerators) or env.host.cpu or '?'}"
        versions = ", ".join(f"{k} {v}" for k, v in env.versions.items() if v)
    code = exit_code(found, state)
    overall = {EXIT_PASS: "PASS", EXIT_VERDICT_FAIL: "FAIL", EXIT_INFRA: "INCOMPLETE"}[code]
    lines = [
        f"# Qualification of `{config}`: {overall}",
        "",
        f"Box: {device}. Versions: {versions or 'unknown'}. Full environment: `environment.json`.",
        "",
        "## Verdicts",
        "",
    ]
    if state.server_left:
        lines += [f"- **A server of this run is still running** — {state.server_left}. The run stopped there.", ""]
    lines += [f"- **{v.name}: {v.status}** — {v.detail}" for v in found]
    lines += report_sections.reply_identity_lines(replies)
    lines += _divergence_lines(out)
    lines += ["", *_recommendation_lines(out), ""]
    plan, speedups = state.plan, Goodput.load_or_none(out / "goodput.json")
    matched = aggregate.render_table(cells).rstrip() if cells else "*(no grid point finished)*"
    sections = {
        "## Acceptance by draft position": _acceptance_table(Acceptance.load_or_none(out / "acceptance.json")),
        "## Per-request acceptance": report_sections.per_request_section(
            PerRequest.load_or_none(out / "per_request.json"), plan.spec_tokens, _why_not(state, "per_request")
        ),
        "## Matched concurrency (rows compared only at equal concurrency)": [
            f"Workload per level: benchmark {' '.join(plan.bench_args)}; k=0 is the reference "
            "(SPECULATIVE_METHOD=none), same config otherwise.",
            "",
            matched,
        ],  # fmt: skip
        "### Speedup at matched concurrency, with its interval": report_sections.matched_speedup_section(
            speedups, _why_not(state, "goodput")
        ),
        "## Goodput at the SLO": report_sections.goodput_section(speedups, _why_not(state, "goodput")),
        "## Graph-mode candidate": report_sections.graphs_section(
            Graphs.load_or_none(out / "graphs.json"), _why_not(state, "graphs")
        ),
        "## Projection: what a better drafter would give on this box": report_sections.projection_section(
            Projection.load_or_none(out / "projection.json"), _why_not(state, "synthetic")
        ),
        "## The recipe's published MI300X figures beside this run": _recipe_table(recipe_figures(), cells, device),
        "## Plots": [f"![{p.stem}]({p.name})" for p in plots],
    }
    for title, body in sections.items():
        lines += [title, "", *body, ""] if body else []
    steps = [[name, step.status, number(step.duration_s, 0, " s"), step.detail.replace("\n", " ")[:300]]
             for name, step in state.steps.items()]  # fmt: skip
    lines += ["## Steps", "", *markdown_table(["step", "status", "time", "detail"], "llrl", steps), ""]
    lines += [
        f"Exit code {code} ({overall}). Raw files: `grid/*.json` (one benchmark result per k), "
        "`results/` (the same, named for benchmarks/results/), `lossless/`, `graphs/` and `projection/` (when "
        "measured), `state.json`.",
        "",
    ]
    return "\n".join(lines)


def write_report(out: Path, state: QualifyState, config: str, plots: bool = True) -> tuple[Path, int, list[Path]]:
    from kimi_dflash.core.atomic_write import write_text_atomic
    from kimi_dflash.sweep.state import finished_results

    results = [(path.stem, result) for path, result in finished_results(out / "grid")]
    cells = aggregate.cells(results)
    acceptance = Acceptance.load_or_none(out / "acceptance.json")
    rows = acceptance.rows if acceptance else []
    if plots:
        written = figures.write_all(cells, rows, out)
    else:  # a rewrite (or --no-plots): list the plots already there
        written = [out / n for n in figures.PLOT_FILES if (out / n).is_file()]
    found = verdicts(out, state)
    path = out / "report.md"
    replies = measures.reply_identity(results)
    write_text_atomic(path, render(out, state, found, cells, written, config, replies))
    return path, exit_code(found, state), written
