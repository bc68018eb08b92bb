"""Head-to-head report from result files: a baseline and one or more candidates, at matched concurrency.

A comparison is only made between levels with the same number of sessions: "DFlash at 32 users vs the
baseline at 8 users" is how misleading speedups are born, so levels present on one side only are listed
as not compared, and if no level matches at all the comparison is refused. Runs whose workload differs
(turns, max tokens, dataset, temperature, ignore_eos, streaming) are refused unless --allow-mismatch,
and then every table carries a warning.

Usage: kimi-dflash compare BASELINE.json CANDIDATE.json [...] [--markdown FILE] [--plots DIR]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.bench import compare_extras, reply_match
from kimi_dflash.bench.intervals import CONFIDENCE_LEVELS
from kimi_dflash.bench.result import BenchmarkResult, LevelResult, Settings, load_result
from kimi_dflash.core import options
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.options import declare, option

# Settings that must agree for two runs to be comparable.
WORKLOAD_KEYS = (
    "turns_per_session", "max_tokens", "temperature", "ignore_eos", "stream", "independent_turns", "prompt_order",
)  # fmt: skip


@dataclass(frozen=True)
class Run:
    path: Path
    name: str
    document: BenchmarkResult

    @property
    def levels(self) -> dict[float, LevelResult]:
        """By session count; by request rate for an open-loop run."""
        return compare_extras.levels_by_load(self.document)


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


def workload_differences(baseline: Run, other: Run) -> list[str]:
    """Human-readable differences in what was measured (not how fast)."""
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
    diffs.extend(compare_extras.open_loop_differences(a, b))
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


# The figures the tables and plots show, each read from a level.
Figure = Callable[[LevelResult], "float | None"]


def output_tok_s(level: LevelResult) -> float | None:
    return level.output_tok_s


def per_user_mean(level: LevelResult) -> float | None:
    return level.per_user_tok_s.mean


def ttft_p95(level: LevelResult) -> float | None:
    return level.ttft_ms.p95


def tpot_p95(level: LevelResult) -> float | None:
    return level.tpot_ms.p95


def e2el_p95(level: LevelResult) -> float | None:
    return level.e2el_s.p95


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _ratio(new: float | None, old: float | None) -> str:
    if new is None or old is None or old == 0:
        return "—"
    return f"{new / old:.2f}x"


def render_markdown(
    runs: list[Run],
    allow_mismatch: bool = False,
    slo_attainment: float = compare_extras.DEFAULT_ATTAINMENT,
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
        blocks.append(
            compare_extras.slo_section(
                baseline.name, baseline.document, candidate.name, candidate.document, slo_attainment
            )
        )
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
    rows = [
        f"## {c_name} vs {b_name} at matched concurrency",
        "",
        (
            f"| sessions | {b_name} tok/s | {c_name} tok/s | speedup | {confidence:.0%} CI | {b_name} user tok/s "
            f"| {c_name} user tok/s "
            f"| TTFT p95 ms ({b_name} → {c_name}) | TPOT p95 ms | E2EL p95 s | failed |"
        ),
        "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for sessions in common:
        b, c = baseline.levels[sessions], candidate.levels[sessions]
        rows.append(
            f"| {compare_extras.load_label(sessions)} | {_f(output_tok_s(b))} | {_f(output_tok_s(c))} "
            f"| **{_ratio(output_tok_s(c), output_tok_s(b))}** "
            f"| {compare_extras.speedup_interval_cell(b, c, confidence)} "
            f"| {_f(per_user_mean(b))} | {_f(per_user_mean(c))} "
            f"| {_f(ttft_p95(b), 0)} → {_f(ttft_p95(c), 0)} "
            f"| {_f(tpot_p95(b))} → {_f(tpot_p95(c))} "
            f"| {_f(e2el_p95(b), 2)} → {_f(e2el_p95(c), 2)} "
            f"| {b.failed} / {c.failed} |"
        )
    rows += [
        "",
        "tok/s: aggregate output tokens per second over the measured window. user tok/s: mean of 1/TPOT per request.",
        "CI: interval of the tok/s speedup over repeats (delta method on the log ratio of means, Welch df); "
        "'not significant' when it contains 1.0.",
        "",
    ]
    return "\n".join(rows)


def _acceptance_table(runs: list[Run]) -> str:
    rows = ["## Speculative decoding (from /metrics deltas after warmup)", ""]
    body = []
    for run in runs:
        for sessions, level in sorted(run.levels.items()):
            spec = level.spec_decode
            if not spec:
                body.append(f"| {run.name} | {sessions} | — | — | no speculation ({level.spec_decode_status}) |")
                continue
            per_pos = ", ".join(f"{p:.3f}" for p in spec.per_position)
            body.append(
                f"| {run.name} | {sessions} | {spec.acceptance_rate:.3f} | {spec.acceptance_length:.2f} | {per_pos} |"
            )
    rows += [
        "| run | sessions | acceptance rate | mean acceptance length τ | per position |",
        "|---|---:|---:|---:|---|",
    ]
    rows += body
    rows.append("")
    return "\n".join(rows)


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
        "(default %(default)s)", default=compare_extras.DEFAULT_ATTAINMENT, above=0, maximum=1)  # fmt: skip
    confidence: float = option("confidence level of the speedup intervals (default %(default)s)",
        choices=CONFIDENCE_LEVELS, default=0.95)  # fmt: skip


add_cli_args = declare(
    CompareOptions,
    "Compare benchmark result files at matched concurrency: markdown table (speedup per level) and PNG plots. The "
    "first file is the baseline.",
    "example: compare_results.py results/baseline.json results/dflash.json --markdown report.md --plots plots/",
)


def main(args: CompareOptions) -> int:
    try:
        runs = load_runs(args.results)
        markdown = render_markdown(
            runs, allow_mismatch=args.allow_mismatch, slo_attainment=args.slo_attainment, confidence=args.confidence
        )
        written: list[Path] = []
        if args.plots is not None:
            from kimi_dflash.bench.plots import write_plots  # matplotlib only when plots are asked for

            written = write_plots(runs, args.plots)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
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
