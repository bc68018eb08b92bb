"""Head-to-head report from result files, only at matched load; runs whose workload differs are refused unless
--allow-mismatch (docs/benchmark.md, "Comparing runs")."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.bench import columns, reply_match
from kimi_dflash.bench.goodput import DEFAULT_ATTAINMENT, describe, sustained
from kimi_dflash.bench.intervals import CONFIDENCE_LEVELS, ratio_interval
from kimi_dflash.bench.result import BenchmarkResult, LevelResult, Settings, load_result
from kimi_dflash.core import options
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.formatting import MISSING, interval, markdown_table, percent, ratio
from kimi_dflash.core.options import declare, option


@dataclass(frozen=True)
class Run:
    path: Path
    name: str
    document: BenchmarkResult

    @property
    def levels(self) -> dict[float, LevelResult]:
        return self.document.levels


def load_runs(paths: list[Path]) -> list[Run]:
    runs = []
    seen: set[str] = set()
    for path in paths:
        document = load_result(path)
        name = document.run.label or path.stem
        if name in seen:
            name = f"{name} ({path.name})"
        seen.add(name)
        runs.append(Run(path=path, name=name, document=document))
    return runs


def open_loop_differences(a: Settings, b: Settings) -> list[str]:
    """Differences in the load's shape that make two runs' levels different things."""
    oa, ob = a.open_loop, b.open_loop
    if oa is None and ob is None:
        return []
    if (oa is None) != (ob is None):
        return ["load: closed loop (--sessions) vs open loop (--request-rate)"]
    assert oa is not None and ob is not None
    keys = ("arrival", "burstiness", "max_concurrency", "sessions_per_level", "think_time_s", "think_time_dist")
    pairs = [(key, getattr(oa, key), getattr(ob, key)) for key in keys]
    return [f"{key}: {x!r} vs {y!r}" for key, x, y in pairs if x != y]


def speedup_interval_cell(baseline: LevelResult, candidate: LevelResult, confidence: float) -> str:
    """``[1.41, 1.58]`` for output tok/s over repeats; ``[0.97, 1.05] not significant`` when it spans 1.0."""
    found = ratio_interval(
        [r.output_tok_s for r in candidate.repeat_results],
        [r.output_tok_s for r in baseline.repeat_results],
        confidence,
    )
    if found is None or found.low is None or found.high is None:
        return "— (needs --repeats ≥ 2)"
    return interval(found.low, found.high) + ("" if found.significant else " not significant")


def slo_section(
    baseline_name: str,
    baseline: BenchmarkResult,
    candidate_name: str,
    candidate: BenchmarkResult,
    threshold: float = DEFAULT_ATTAINMENT,
) -> str:
    """The "speedup at the SLO" section (empty when neither run measured an SLO)."""
    b_slo, c_slo = baseline.settings.slo, candidate.settings.slo
    if not b_slo and not c_slo:
        return ""
    title = f"## {candidate_name} vs {baseline_name} at the SLO"
    if b_slo != c_slo:
        return (
            f"{title}\n\nNot compared: the runs measured different SLOs ({baseline_name}: "
            f"{describe(b_slo or {}) or 'none'}; {candidate_name}: {describe(c_slo or {}) or 'none'}). "
            "Re-run both with the same --slo.\n"
        )
    b_levels, c_levels = baseline.levels, candidate.levels
    rows, found = [], {}
    for name, levels in ((baseline_name, b_levels), (candidate_name, c_levels)):
        found[name] = best = sustained(levels, threshold)
        if best is None:
            rows.append([name, f"none (no level reaches {percent(threshold, 0)})"] + [MISSING] * len(columns.SLO))
        else:
            rows.append([name, columns.LEVEL.cell(best[1])] + [column.cell(best[1]) for column in columns.SLO])
    lines = [
        title,
        "",
        f"SLO: {describe(b_slo or {})}; a load is sustained when at least {percent(threshold, 0)} of its requests "
        "meet it.",
        "",
        *markdown_table(
            ["run", "sustained load", *(c.header for c in columns.SLO)], "lr" + "r" * len(columns.SLO), rows
        ),
        "",
    ]
    b_best, c_best = found[baseline_name], found[candidate_name]
    if b_best is not None and c_best is not None:
        speedup = columns.OUTPUT_GOODPUT.over(c_best[1], b_best[1])
        lines.append(
            f"**Speedup at the SLO: {ratio(speedup)}** (goodput tok/s, {candidate_name} at "
            f"{columns.LEVEL.cell(c_best[1])} vs {baseline_name} at {columns.LEVEL.cell(b_best[1])}). Only levels that "
            "were measured count: a sweep with more levels can move the sustained load."
        )
    else:
        lines.append("**Speedup at the SLO: —** (a side sustains no measured load within the SLO)")
    lines.append("")
    return "\n".join(lines)


# Settings that must agree for two runs to be comparable.
WORKLOAD_KEYS = (
    "turns_per_session", "max_tokens", "temperature", "ignore_eos", "stream", "independent_turns", "prompt_order",
)  # fmt: skip


def workload_differences(baseline: Run, other: Run) -> list[str]:
    a, b = baseline.document.settings, other.document.settings
    diffs = [
        f"{key}: {getattr(a, key)!r} vs {getattr(b, key)!r}"
        for key in WORKLOAD_KEYS
        if getattr(a, key) != getattr(b, key)
    ]
    if _dataset_field(a, "sha256") != _dataset_field(b, "sha256"):
        diffs.append(f"dataset: {_dataset_field(a, 'name')} vs {_dataset_field(b, 'name')} (different prompts)")
    if (a.endpoint or "chat") != (b.endpoint or "chat"):  # files from before --endpoint are chat
        diffs.append(f"endpoint: {a.endpoint or 'chat'!r} vs {b.endpoint or 'chat'!r}")
    if a.extra_body != b.extra_body:  # thinking on/off, top_p ...: a different workload
        diffs.append(f"extra_body: {a.extra_body!r} vs {b.extra_body!r}")
    if a.seed != b.seed:
        diffs.append(f"seed: {a.seed!r} vs {b.seed!r} (different conversations)")
    diffs.extend(open_loop_differences(a, b))
    return diffs


def _dataset_field(settings: Settings, name: str) -> str | None:
    return getattr(settings.dataset, name) if settings.dataset else None


def quality_notes(run: Run) -> list[str]:
    notes = []
    status = run.document.run.status
    if status != "complete":
        notes.append(f"{run.name}: run status is {status!r}, results may be partial")
    for level in run.document.results:
        if level.partial:
            notes.append(f"{run.name}: level {level.sessions} is partial")
        if level.failed:
            notes.append(f"{run.name}: level {level.sessions} had {level.failed} failed request(s)")
        if level.tokens_counted_from_chunks:
            notes.append(f"{run.name}: level {level.sessions} counted tokens from chunks (no usage reported)")
    return notes


def render_markdown(
    runs: list[Run],
    allow_mismatch: bool = False,
    slo_attainment: float = DEFAULT_ATTAINMENT,
    confidence: float = 0.95,
) -> str:
    """The comparison report. Raises UserError when nothing can honestly be compared."""
    if len(runs) < 2:
        raise UserError("give at least two result files: the baseline first, then the candidate(s).")
    baseline, candidates = runs[0], runs[1:]
    lines = [f"# Benchmark comparison: {', '.join(r.name for r in candidates)} vs {baseline.name} (baseline)", ""]
    warnings: list[str] = []
    blocks: list[str] = []
    for candidate in candidates:
        diffs = workload_differences(baseline, candidate)
        if diffs and not allow_mismatch:
            raise UserError(
                f"{candidate.path} and {baseline.path} measured different workloads ({'; '.join(diffs)}). "
                "Re-run with matching settings, or pass --allow-mismatch to compare anyway (flagged in the report)."
            )
        if diffs:
            warnings.append(f"**{candidate.name} vs {baseline.name}: different workloads** — " + "; ".join(diffs))
        common = sorted(set(baseline.levels) & set(candidate.levels))
        only_base = sorted(set(baseline.levels) - set(candidate.levels))
        only_cand = sorted(set(candidate.levels) - set(baseline.levels))
        if not common:
            raise UserError(
                f"refusing to compare {candidate.name} with {baseline.name}: no concurrency level in common "
                f"({candidate.name}: {sorted(candidate.levels)}, {baseline.name}: {sorted(baseline.levels)}). "
                "Speedups are only meaningful at matched concurrency; re-run with a shared --sessions level."
            )
        if only_base or only_cand:
            warnings.append(
                f"**Not compared (no matching concurrency):** {baseline.name} levels {only_base or '—'}, "
                f"{candidate.name} levels {only_cand or '—'}. Never read a speedup across different session counts."
            )
        blocks.append(_level_table(baseline, candidate, common, confidence))
        blocks.append(slo_section(baseline.name, baseline.document, candidate.name, candidate.document, slo_attainment))
        names = (baseline.name, candidate.name)
        blocks.append(reply_match.markdown(baseline.document, candidate.document, names, common))
    for run in runs:
        warnings.extend(quality_notes(run))
    if warnings:
        lines.append("> ⚠️ **Read before quoting these numbers**")
        lines.extend(f"> - {w}" for w in warnings)
        lines.append("")
    lines.extend(blocks)
    lines.append(_acceptance_table(runs))
    lines.append(_sources(runs))
    return "\n".join(lines).rstrip() + "\n"


def _level_table(baseline: Run, candidate: Run, common: list[float], confidence: float = 0.95) -> str:
    b_name, c_name = baseline.name, candidate.name
    first, *side_by_side = columns.COMPARE_SIDE_BY_SIDE
    arrows = columns.COMPARE_ARROWS
    header = ["sessions", f"{b_name} {first.header}", f"{c_name} {first.header}", "speedup",
              f"{percent(confidence, 0)} CI", *(f"{n} {c.header}" for c in side_by_side for n in (b_name, c_name)),
              f"{arrows[0].header} ({b_name} → {c_name})", *(c.header for c in arrows[1:])]  # fmt: skip
    rows = []
    for key in common:
        b, c = baseline.levels[key], candidate.levels[key]
        rows.append(
            [columns.LEVEL.cell(b), first.cell(b), first.cell(c), f"**{ratio(first.over(c, b))}**",
             speedup_interval_cell(b, c, confidence),
             *(column.cell(level) for column in side_by_side for level in (b, c)),
             *(f"{column.cell(b)} → {column.cell(c)}" for column in arrows)]
        )  # fmt: skip
    notes = [
        f"{columns.OUTPUT_TOK_S.header}: aggregate output tokens per second over the measured window. "
        f"{columns.PER_USER['mean'].header}: mean of 1/TPOT per request.",
        "CI: interval of the speedup over repeats (delta method on the log ratio of means, Welch df); "
        "'not significant' when it contains 1.0.",
    ]
    title = f"## {c_name} vs {b_name} at matched concurrency"
    return "\n".join([title, "", *markdown_table(header, "rrrrl" + "r" * (len(header) - 5), rows), "", *notes, ""])


def _acceptance_table(runs: list[Run]) -> str:
    rows = []
    for run in runs:
        for level in (level for _, level in sorted(run.levels.items())):
            spec = level.spec_decode
            positions = (", ".join(columns.ACCEPTANCE_RATE.fmt(p) for p in spec.per_position) if spec
                         else f"no speculation ({level.spec_decode_status})")  # fmt: skip
            rows.append([run.name, columns.LEVEL.cell(level), *(c.cell(level) for c in columns.SPEC), positions])
    header = ["run", "sessions", *(c.header for c in columns.SPEC), "per position"]
    title = "## Speculative decoding (from /metrics deltas after warmup)"
    return "\n".join([title, "", *markdown_table(header, "lr" + "r" * len(columns.SPEC) + "l", rows), ""])


def _sources(runs: list[Run]) -> str:
    rows = ["## Sources", ""]
    for run in runs:
        doc = run.document
        version = doc.server.version if doc.server else None
        rows.append(
            f"- **{run.name}**: `{run.path}` — server {version or 'unknown'}, "
            f"model {doc.settings.model}, started {doc.run.started_at}, "
            f"tool {doc.tool.version} ({doc.tool.git_revision or 'no git revision'})"
        )
    rows.append("")
    return "\n".join(rows)


@dataclass(kw_only=True)
class CompareOptions:
    results: list[Path] = option("result JSON files; the first is the baseline", positional=True, required=True)
    markdown: Path | None = option("write the markdown report here (default: stdout)")
    plots: Path | None = option("write PNG plots into this directory (needs matplotlib)")
    allow_mismatch: bool = option("compare runs with different workloads anyway (flagged loudly)")
    slo_attainment: float = option("fraction of requests that must meet the SLO for a load to count as sustained "
        "(default %(default)s)", default=DEFAULT_ATTAINMENT, above=0, maximum=1)  # fmt: skip
    confidence: float = option("confidence level of the speedup intervals (default %(default)s)",
        choices=CONFIDENCE_LEVELS, default=0.95)  # fmt: skip


add_cli_args = declare(
    CompareOptions,
    "Compare benchmark result files at matched concurrency: markdown table (speedup per level) and PNG plots. The "
    "first file is the baseline.",
    "example: compare_results.py results/baseline.json results/dflash.json --markdown report.md --plots plots/",
)


def main(args: CompareOptions) -> int:
    runs = load_runs(args.results)
    markdown = render_markdown(
        runs, allow_mismatch=args.allow_mismatch, slo_attainment=args.slo_attainment, confidence=args.confidence
    )
    written: list[Path] = []
    if args.plots is not None:
        from kimi_dflash.bench.plots import write_plots  # matplotlib only when plots are asked for

        written = write_plots(runs, args.plots)
    if args.markdown is None:
        sys.stdout.write(markdown)
    else:
        write_text_atomic(args.markdown, markdown)
        print(f"markdown written to {args.markdown}", file=sys.stderr)
    for path in written:
        print(f"plot written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(options.run(__name__, prog="compare_results.py"))
