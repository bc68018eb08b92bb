"""Head-to-head report from result files, only at matched load (docs/benchmark.md, "Comparing runs")."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kimi_dflash.bench import columns, reply_match
from kimi_dflash.bench.goodput import DEFAULT_ATTAINMENT, describe, sustained
from kimi_dflash.bench.intervals import CONFIDENCE_LEVELS, ratio_interval
from kimi_dflash.bench.report import level_warnings
from kimi_dflash.bench.result import BenchmarkResult, LevelResult, load_result
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


def slo_section(baseline: Run, candidate: Run, threshold: float = DEFAULT_ATTAINMENT) -> str:
    """The "speedup at the SLO" section (empty when neither run measured an SLO)."""
    b_slo, c_slo = baseline.document.settings.slo, candidate.document.settings.slo
    if not b_slo and not c_slo:
        return ""
    title = f"## {candidate.name} vs {baseline.name} at the SLO"
    if b_slo != c_slo:
        return (
            f"{title}\n\nNot compared: the runs measured different SLOs ({baseline.name}: "
            f"{describe(b_slo or {}) or 'none'}; {candidate.name}: {describe(c_slo or {}) or 'none'}). "
            "Re-run both with the same --slo.\n"
        )
    b_best, c_best = (sustained(run.levels, threshold) for run in (baseline, candidate))
    none = [f"none (no level reaches {percent(threshold, 0)})", *[MISSING] * len(columns.SLO)]
    rows = [
        [run.name, *([columns.LEVEL.cell(best[1]), *(c.cell(best[1]) for c in columns.SLO)] if best else none)]
        for run, best in ((baseline, b_best), (candidate, c_best))
    ]
    sustains = f"a load is sustained when at least {percent(threshold, 0)} of its requests meet it"
    header = ["run", "sustained load", *(c.header for c in columns.SLO)]
    lines = [
        title,
        "",
        f"SLO: {describe(b_slo or {})}; {sustains}.",
        "",
        *markdown_table(header, "lr" + "r" * len(columns.SLO), rows),
        "",
    ]
    if b_best is not None and c_best is not None:
        speedup = columns.OUTPUT_GOODPUT.over(c_best[1], b_best[1])
        lines.append(
            f"**Speedup at the SLO: {ratio(speedup)}** (goodput tok/s, {candidate.name} at "
            f"{columns.LEVEL.cell(c_best[1])} vs {baseline.name} at {columns.LEVEL.cell(b_best[1])}). Only levels that "
            "were measured count: a sweep with more levels can move the sustained load."
        )
    else:
        lines.append("**Speedup at the SLO: —** (a side sustains no measured load within the SLO)")
    return "\n".join([*lines, ""])


# Settings that must agree for two runs to be comparable (and the dataset, endpoint, seed, open loop: below).
WORKLOAD_KEYS = ("turns_per_session", "max_tokens", "temperature", "ignore_eos", "stream", "independent_turns")


def _differences(a: Any, b: Any, keys: Iterable[str]) -> list[str]:
    pairs = [(key, getattr(a, key), getattr(b, key)) for key in keys]
    return [f"{key}: {x!r} vs {y!r}" for key, x, y in pairs if x != y]


def workload_differences(baseline: Run, other: Run) -> list[str]:
    a, b = baseline.document.settings, other.document.settings
    diffs = _differences(a, b, (*WORKLOAD_KEYS, "prompt_order", "extra_body"))  # extra_body: thinking, top_p ...
    if (a.dataset and a.dataset.sha256) != (b.dataset and b.dataset.sha256):
        diffs.append(f"dataset: {a.dataset and a.dataset.name} vs {b.dataset and b.dataset.name} (different prompts)")
    if (a.endpoint or "chat") != (b.endpoint or "chat"):  # files from before --endpoint are chat
        diffs.append(f"endpoint: {a.endpoint or 'chat'!r} vs {b.endpoint or 'chat'!r}")
    if a.seed != b.seed:
        diffs.append(f"seed: {a.seed!r} vs {b.seed!r} (different conversations)")
    oa, ob = a.open_loop, b.open_loop  # the load's shape: levels of different shapes are different things
    if (oa is None) != (ob is None):
        diffs.append("load: closed loop (--sessions) vs open loop (--request-rate)")
    elif oa and ob:
        diffs += _differences(oa, ob, (f.name for f in fields(oa) if f.name != "request_rates"))
    return diffs


def quality_notes(run: Run) -> list[str]:
    status = run.document.run.status
    notes = [f"{run.name}: run status is {status!r}, results may be partial"] if status != "complete" else []
    return notes + [
        f"{run.name}: level {level.sessions}: {note}"
        for level in run.document.results
        for note in level_warnings(level)
    ]


def render_markdown(
    runs: list[Run], allow_mismatch: bool = False, slo_attainment: float = DEFAULT_ATTAINMENT, confidence: float = 0.95
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
        names = (baseline.name, candidate.name)
        blocks += [
            _level_table(baseline, candidate, common, confidence),
            slo_section(baseline, candidate, slo_attainment),
            reply_match.markdown(baseline.document, candidate.document, names, common),
        ]
    warnings += [note for run in runs for note in quality_notes(run)]
    if warnings:
        lines += ["> ⚠️ **Read before quoting these numbers**", *(f"> - {w}" for w in warnings), ""]
    return "\n".join([*lines, *blocks, _acceptance_table(runs), _sources(runs)]).rstrip() + "\n"


def _level_table(baseline: Run, candidate: Run, common: list[float], confidence: float = 0.95) -> str:
    b_name, c_name = baseline.name, candidate.name
    first, *side_by_side = columns.COMPARE_SIDE_BY_SIDE
    arrow_headers = [
        f"{c.header} ({b_name} → {c_name})" if not i else c.header for i, c in enumerate(columns.COMPARE_ARROWS)
    ]

    def row(b: LevelResult, c: LevelResult) -> dict[str, str]:
        return {
            "sessions": columns.LEVEL.cell(b),
            f"{b_name} {first.header}": first.cell(b),
            f"{c_name} {first.header}": first.cell(c),
            "speedup": f"**{ratio(first.over(c, b))}**",
            f"{percent(confidence, 0)} CI": speedup_interval_cell(b, c, confidence),
            **{
                f"{name} {col.header}": col.cell(level)
                for col in side_by_side
                for name, level in ((b_name, b), (c_name, c))
            },
            **{head: f"{col.cell(b)} → {col.cell(c)}" for head, col in zip(arrow_headers, columns.COMPARE_ARROWS)},
        }

    rows = [row(baseline.levels[key], candidate.levels[key]) for key in common]
    notes = [
        f"{columns.OUTPUT_TOK_S.header}: aggregate output tokens per second over the measured window. "
        f"{columns.PER_USER['mean'].header}: mean of 1/TPOT per request.",
        "CI: interval of the speedup over repeats (delta method on the log ratio of means, Welch df); "
        "'not significant' when it contains 1.0.",
    ]
    table = markdown_table(list(rows[0]), "rrrrl" + "r" * (len(rows[0]) - 5), [list(r.values()) for r in rows])
    return "\n".join([f"## {c_name} vs {b_name} at matched concurrency", "", *table, "", *notes, ""])


def _acceptance_table(runs: list[Run]) -> str:
    rows = []
    for run in runs:
        for level in (level for _, level in sorted(run.levels.items())):
            spec = level.spec_decode
            shown = ", ".join(columns.ACCEPTANCE_RATE.fmt(p) for p in spec.per_position) if spec else None
            positions = shown or f"no speculation ({level.spec_decode_status})"
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
    slo_attainment: float = option(
        "fraction of requests that must meet the SLO for a load to count as sustained (default %(default)s)",
        default=DEFAULT_ATTAINMENT,
        above=0,
        maximum=1,
    )
    confidence: float = option(
        "confidence level of the speedup intervals (default %(default)s)", choices=CONFIDENCE_LEVELS, default=0.95
    )


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
