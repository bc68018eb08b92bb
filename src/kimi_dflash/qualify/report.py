"""OUT/report.md; verdicts and the exit code (docs/qualify.md's table) are pure functions of the state and files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.advisor.model import weighted_per_position
from kimi_dflash.bench import columns
from kimi_dflash.bench.result import BenchmarkResult
from kimi_dflash.config.schema import KEY
from kimi_dflash.core.formatting import general, markdown_table, number, percent, ratio
from kimi_dflash.fp8.validate import Fp8Summary
from kimi_dflash.qualify import amplitude, depths, documents, measures, report_sections
from kimi_dflash.qualify.documents import ReplyIdentityRow as ReplyRow
from kimi_dflash.qualify.environment import Environment
from kimi_dflash.qualify.lossless import LosslessVerdict
from kimi_dflash.qualify.plan import Candidate
from kimi_dflash.qualify.state import QualifyState
from kimi_dflash.results_doc import recipe_figures
from kimi_dflash.runs.state import FAILED
from kimi_dflash.sweep import aggregate

EXIT_PASS, EXIT_INFRA, EXIT_VERDICT_FAIL = 0, 1, 2
OVERALL = {EXIT_PASS: "PASS", EXIT_VERDICT_FAIL: "FAIL", EXIT_INFRA: "INCOMPLETE"}
NOT_RUN = "NOT RUN"
ACCEPTANCE_PNG = "acceptance_by_position.png"
PLOT_FILES = ("tok_s_vs_concurrency.png", "pareto.png", ACCEPTANCE_PNG)  # in report order


@dataclass(frozen=True)
class Verdict:
    name: str
    status: str  # PASS, WARN, FAIL, NOT RUN
    detail: str


def _lossless(out: Path, state: QualifyState, name: str = "lossless (T=0 token identity)") -> Verdict:
    lossless = LosslessVerdict.load_or_none(out / "lossless" / "verdict.json")
    if lossless is None:
        why = state.steps["candidate"].detail if "candidate" in state.steps else "the candidate step did not run"
        return Verdict(name, NOT_RUN, why)
    agreement = lossless.agreement
    detail = (
        f"{agreement.identical}/{agreement.prompts} outputs token-identical to the reference (up to "
        f"{lossless.max_tokens} tokens each)"
    )
    return Verdict(name, lossless.verdict, detail)


def candidate_view(out: Path, state: QualifyState, candidate: Candidate) -> tuple[Path, QualifyState]:
    """A shoot-out candidate's directory and the run's state as its own: its plan, its steps without the prefix."""
    prefix = f"{candidate.name}/"
    steps = {name.removeprefix(prefix): s for name, s in state.steps.items() if name.startswith(prefix)}
    return out / "candidates" / candidate.name, state.model_copy(update={"plan": candidate.plan, "steps": steps})


def _beside(out: Path, of: str = "") -> list[Verdict]:
    """Servers judged beside the candidate: one not lossless is left out of the tuned settings, so it warns here."""
    found = {p.stem.removeprefix("verdict-"): LosslessVerdict.load_or_none(p) for p in out.glob("lossless/verdict-*")}
    if not found:
        return []
    shown = ", ".join(f"{what} {v.verdict if v else 'unreadable'}" for what, v in sorted(found.items()))
    status = "PASS" if all(v and v.verdict == "PASS" for v in found.values()) else "WARN"
    return [Verdict(f"{of}token identity of the other servers (depths, schedule, RoPE amplitudes)", status, shown)]


def verdicts(out: Path, state: QualifyState) -> list[Verdict]:
    found = [
        v
        for c in state.plan.candidates
        for v in (
            _lossless(*candidate_view(out, state, c), f"`{c.config}` lossless (T=0 token identity)"),
            *_beside(out / "candidates" / c.name, f"`{c.config}` "),
        )
    ] or [_lossless(out, state), *_beside(out)]
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


def _divergence_lines(out: Path, of: str = "") -> list[str]:
    lossless = LosslessVerdict.load_or_none(out / "lossless" / "verdict.json")
    d = lossless.first_divergence if lossless else None
    if d is None:
        return []
    prompt = d.prompt.replace("\n", " ")[:80]
    return [
        "",
        f"First divergence{of}: prompt {d.prompt_index} ({prompt!r}), output token {d.position} "
        f"(text decoded with {d.decoded_with}):",
        "",
        f"- after: `{d.shared_text}`" if d.shared_text is not None else "- after: (other tokenizer)",
        f"- reference: `{d.reference_text}` ids {d.reference_ids}"
        if d.reference_text is not None
        else f"- reference: ids {d.reference_ids} (another tokenizer: not decoded)",
        f"- candidate: `{d.candidate_text}` ids {d.candidate_ids}",
    ]


def _recommendation_lines(out: Path) -> list[str]:
    advisor = documents.Advisor.load_or_none(out / "advisor.json")
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


def _chosen_lines(out: Path) -> list[str]:
    """What the amplitude and schedule steps chose (--write-config writes the same)."""
    rope = documents.Amplitude.load_or_none(out / amplitude.DOCUMENT)
    depth = documents.Schedule.load_or_none(out / depths.DOCUMENT)
    lines = [f"- recommended `{KEY.DRAFTER_ROPE_AMPLITUDE}={rope.value}`: {rope.why}"] if rope and rope.value else []
    if depth and depth.schedule:
        schedule = f"{KEY.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE}={depth.schedule}"
        lines.append(f"- depth by load: `{schedule}` (token identity {depth.lossless})")
    return lines


def _acceptance_table(out: Path) -> list[str]:
    doc = documents.Acceptance.load_or_none(out / "acceptance.json")
    if not doc or not doc.rows:
        return ["*(no acceptance counters: no speculative point finished)*"]
    rows = sorted(doc.rows, key=lambda r: (r.k, r.sessions))
    width = max(len(r.per_position) for r in rows)
    rate, tau = columns.ACCEPTANCE_RATE, columns.ACCEPTANCE_LENGTH
    header = ["k", "sessions", *(f"pos {i + 1}" for i in range(width)), rate.header, tau.header]
    table = []
    for r in rows:
        positions = [*map(rate.fmt, r.per_position), *[""] * (width - len(r.per_position))]
        table.append([r.k, r.sessions, *positions, rate.fmt(r.acceptance_rate), tau.fmt(r.acceptance_length)])
    return markdown_table(header, "r" * len(header), table)


def _recipe_table(cells: Sequence[aggregate.Cell], device: str) -> list[str]:
    recipe, rows = recipe_figures(), []
    for row in recipe.rows:
        k, sessions = row.spec_tokens, row.sessions
        match = next(
            (c for c in cells if c.sessions == sessions and c.overrides.get(KEY.NUM_SPECULATIVE_TOKENS) == str(k)), None
        )
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
    record = state.steps.get(step)
    if record is not None and record.detail:
        return f"{step} step {record.status}: {record.detail}"
    planned = next((s for s in state.plan.steps if s.name == step), None)
    if planned and planned.reason:
        return planned.reason
    return f"the {step} step did not run"


def _head(out: Path, state: QualifyState, found: Sequence[Verdict], title: str) -> tuple[list[str], str]:
    env = Environment.load_or_none(out / "environment.json")
    device, versions = "?, ?", ""
    if env is not None:
        device = f"{env.host.hostname}, {', '.join(env.accelerators) or env.host.cpu or '?'}"
        versions = ", ".join(f"{k} {v}" for k, v in env.versions.items() if v)
    lines = [
        f"# {title}: {OVERALL[exit_code(found, state)]}",
        "",
        f"Box: {device}. Versions: {versions or 'unknown'}. Full environment: `environment.json`.",
        "",
        "## Verdicts",
        "",
    ]
    if state.server_left:
        lines += [f"- **A server of this run is still running** — {state.server_left}. The run stopped there.", ""]
    return lines + [f"- **{v.name}: {v.status}** — {v.detail}" for v in found], device


def _measured(out: Path, state: QualifyState, cells: Sequence[aggregate.Cell]) -> dict[str, list[str]]:
    plan, speedups = state.plan, documents.Goodput.load_or_none(out / "goodput.json")
    matched = aggregate.render_table(cells).rstrip() if cells else "*(no grid point finished)*"
    per_request = documents.PerRequest.load_or_none(out / "per_request.json")
    return {
        "## Acceptance by draft position": _acceptance_table(out),
        "## Per-request acceptance": report_sections.per_request_section(
            per_request, plan.spec_tokens, _why_not(state, "per_request")
        ),
        "## Matched concurrency (rows compared only at equal concurrency)": [
            f"Workload per level: benchmark {' '.join(plan.bench_args)}; k=0 is the reference "
            "(SPECULATIVE_METHOD=none), same config otherwise.",
            "",
            matched,
        ],
        "### Speedup at matched concurrency, with its interval": report_sections.matched_speedup_section(
            speedups, _why_not(state, "goodput")
        ),
        "## Goodput at the SLO": report_sections.goodput_section(speedups, _why_not(state, "goodput")),
        "## Drafter RoPE amplitude": amplitude.section(
            documents.Amplitude.load_or_none(out / amplitude.DOCUMENT), _why_not(state, "amplitude")
        ),
    }


def _sections(sections: dict[str, list[str]], deeper: str = "") -> list[str]:
    return [line for title, body in sections.items() if body for line in (deeper + title, "", *body, "")]


def _steps_and_exit(state: QualifyState, found: Sequence[Verdict]) -> list[str]:
    steps = [
        [name, step.status, number(step.duration_s, 0, " s"), step.detail.replace("\n", " ")[:300]]
        for name, step in state.steps.items()
    ]
    code = exit_code(found, state)
    return [
        "## Steps",
        "",
        *markdown_table(["step", "status", "time", "detail"], "llrl", steps),
        "",
        f"Exit code {code} ({OVERALL[code]}). Raw files: `grid/*.json` (one benchmark result per k), "
        "`results/` (the same, named for benchmarks/results/), `lossless/`, `graphs/` and `projection/` (when "
        "measured), `candidates/<name>/` (a shoot-out's), `state.json`.",
        "",
    ]


def render(
    out: Path,
    state: QualifyState,
    found: Sequence[Verdict],
    cells: Sequence[aggregate.Cell],
    plots: Sequence[Path],
    config: str,
    replies: Sequence[ReplyRow] = (),
) -> str:
    lines, device = _head(out, state, found, f"Qualification of `{config}`")
    lines += report_sections.reply_identity_lines(replies)
    lines += _divergence_lines(out)
    lines += ["", *_chosen_lines(out), *_recommendation_lines(out), ""]
    sections = {
        **_measured(out, state, cells),
        "## Depth by load: the schedule against every fixed k": depths.section(
            documents.Schedule.load_or_none(out / depths.DOCUMENT),
            _why_not(state, "schedule"),
            [p for p in plots if p.name == depths.PLOT],
        ),
        "## Graph-mode candidate": report_sections.graphs_section(
            documents.Graphs.load_or_none(out / "graphs.json"), _why_not(state, "graphs")
        ),
        "## Projection: what a better drafter would give on this box": report_sections.projection_section(
            documents.Projection.load_or_none(out / "projection.json"), _why_not(state, "synthetic")
        ),
        "## The recipe's published MI300X figures beside this run": _recipe_table(cells, device),
        "## Plots": [f"![{p.stem}]({p.name})" for p in plots if p.name != depths.PLOT],
    }
    return "\n".join(lines + _sections(sections) + _steps_and_exit(state, found))


def render_shootout(
    out: Path,
    state: QualifyState,
    found: Sequence[Verdict],
    config: str,
    candidates: Sequence[tuple[list[tuple[str, BenchmarkResult]], list[Path]]],
) -> str:
    """``candidates``: per candidate of the plan, its results with the reference's, and its plots."""
    names = ", ".join(f"`{c.config}`" for c in state.plan.candidates)
    lines, device = _head(out, state, found, f"Shoot-out of {names} against `{config}` without speculation")
    for c in state.plan.candidates:
        lines += _divergence_lines(out / "candidates" / c.name, f" of `{c.config}`")
    ranking = documents.Shootout.load_or_none(out / "shootout.json")
    lines += ["", "## Ranking", "", *report_sections.ranking_section(ranking, _why_not(state, "ranking")), ""]
    for c, (results, plots) in zip(state.plan.candidates, candidates):
        directory, view = candidate_view(out, state, c)
        cells = aggregate.cells(results)
        lines += [
            f"## Candidate `{c.config}`: SPECULATIVE_METHOD={c.plan.method}, k={c.plan.spec_tokens}",
            "",
            *report_sections.reply_identity_lines(measures.reply_identity(results)),
            *_recommendation_lines(directory),
            "",
        ]
        sections = {
            **_measured(directory, view, cells),
            "## The recipe's published MI300X figures beside this candidate": _recipe_table(cells, device),
            "## Plots": [f"![{p.stem}]({p.relative_to(out).as_posix()})" for p in plots],
        }
        lines += _sections(sections, "#")
    return "\n".join(lines + _steps_and_exit(state, found))


def acceptance_by_k(rows: Sequence[documents.AcceptanceRow]) -> dict[int, list[float]]:
    """Per k, acceptance at each position over every concurrency, weighted by drafts (pure)."""
    return {
        k: list(weighted_per_position([(r.drafts, r.per_position) for r in rows if r.k == k]))
        for k in sorted({r.k for r in rows})
    }


def _plots(directory: Path, cells: Sequence[aggregate.Cell], plots: bool) -> list[Path]:
    """The plots of a grid (written when ``plots``; else those already there: a rewrite, or --no-plots)."""
    if not plots:
        return [directory / n for n in (*PLOT_FILES, depths.PLOT) if (directory / n).is_file()]
    from kimi_dflash.bench.plots import line_chart

    acceptance = documents.Acceptance.load_or_none(directory / "acceptance.json")
    schedule = depths.write_plot(documents.Schedule.load_or_none(directory / depths.DOCUMENT), directory)
    written = aggregate.write_plots(cells, directory) if cells else []
    if acceptance and acceptance.rows:
        by_k = acceptance_by_k(acceptance.rows)
        series = {f"k={k}": (range(1, len(v) + 1), [p * 100 for p in v]) for k, v in by_k.items()}
        title, axes = "Acceptance by draft position (all concurrencies)", ("draft position", "accepted / drafts (%)")
        written.append(
            line_chart(directory / ACCEPTANCE_PNG, series, title, *axes, legend_size=8, ylim=(0, 100), integer_x=True)
        )
    return written + schedule


def write_report(out: Path, state: QualifyState, config: str, plots: bool = True) -> tuple[Path, int, list[Path]]:
    from kimi_dflash.core.atomic_write import write_text_atomic
    from kimi_dflash.sweep.state import finished_results

    results = [(path.stem, result) for path, result in finished_results(out / "grid")]
    found, written = verdicts(out, state), []
    if state.plan.candidates:
        candidates = []
        for c in state.plan.candidates:
            own = results + [(p.stem, r) for p, r in finished_results(out / "candidates" / c.name / "grid")]
            candidates.append((own, _plots(out / "candidates" / c.name, aggregate.cells(own), plots)))
            written += candidates[-1][1]
        text = render_shootout(out, state, found, config, candidates)
    else:
        cells = aggregate.cells(results)
        written = _plots(out, cells, plots)
        text = render(out, state, found, cells, written, config, measures.reply_identity(results))
    path = out / "report.md"
    write_text_atomic(path, text)
    return path, exit_code(found, state), written
