"""Head-to-head report from result files: a baseline and one or more candidates, at matched concurrency.

A comparison is only made between levels with the same number of sessions: "DFlash at 32 users vs the
baseline at 8 users" is how misleading speedups are born, so levels present on one side only are listed
as not compared, and if no level matches at all the comparison is refused. Runs whose workload differs
(turns, max tokens, dataset, temperature, ignore_eos, streaming) are refused unless --allow-mismatch,
and then every table carries a warning.

Usage: python payload/compare_results.py BASELINE.json CANDIDATE.json [...] [--markdown FILE] [--plots DIR]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_dflash.bench.errors import UserError
from kimi_dflash.bench.report import load_document

# Settings that must agree for two runs to be comparable.
WORKLOAD_KEYS = (
    "turns_per_session", "max_tokens", "temperature", "ignore_eos", "stream", "independent_turns", "prompt_order",
)  # fmt: skip


@dataclass(frozen=True)
class Run:
    path: Path
    name: str
    document: dict[str, Any]

    @property
    def levels(self) -> dict[int, dict[str, Any]]:
        return {int(result["sessions"]): result for result in self.document["results"]}


def load_runs(paths: list[Path]) -> list[Run]:
    runs = []
    seen: set[str] = set()
    for path in paths:
        document = load_document(path)
        name = document.get("run", {}).get("label") or path.stem
        if name in seen:
            name = f"{name} ({path.name})"
        seen.add(name)
        runs.append(Run(path=path, name=name, document=document))
    return runs


def workload_differences(baseline: Run, other: Run) -> list[str]:
    """Human-readable differences in what was measured (not how fast)."""
    a, b = baseline.document.get("settings", {}), other.document.get("settings", {})
    diffs = [f"{key}: {a.get(key)!r} vs {b.get(key)!r}" for key in WORKLOAD_KEYS if a.get(key) != b.get(key)]
    da, db = (a.get("dataset") or {}).get("sha256"), (b.get("dataset") or {}).get("sha256")
    if da != db:
        diffs.append(f"dataset: {(a.get('dataset') or {}).get('name')} vs {(b.get('dataset') or {}).get('name')} (different prompts)")
    if a.get("seed") != b.get("seed"):
        diffs.append(f"seed: {a.get('seed')!r} vs {b.get('seed')!r} (different conversations)")
    return diffs


def quality_notes(run: Run) -> list[str]:
    notes = []
    status = run.document.get("run", {}).get("status")
    if status != "complete":
        notes.append(f"{run.name}: run status is {status!r}, results may be partial")
    for level in run.document["results"]:
        if level.get("partial"):
            notes.append(f"{run.name}: level {level['sessions']} is partial")
        if level.get("failed"):
            notes.append(f"{run.name}: level {level['sessions']} had {level['failed']} failed request(s)")
        if level.get("tokens_counted_from_chunks"):
            notes.append(f"{run.name}: level {level['sessions']} counted tokens from chunks (no usage reported)")
    return notes


def _get(level: dict[str, Any] | None, *keys: str) -> float | None:
    value: Any = level
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value if isinstance(value, (int, float)) else None


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _ratio(new: float | None, old: float | None) -> str:
    if new is None or old is None or old == 0:
        return "—"
    return f"{new / old:.2f}x"


def render_markdown(runs: list[Run], allow_mismatch: bool = False) -> str:
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
        blocks.append(_level_table(baseline, candidate, common))
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


def _level_table(baseline: Run, candidate: Run, common: list[int]) -> str:
    b_name, c_name = baseline.name, candidate.name
    rows = [
        f"## {c_name} vs {b_name} at matched concurrency",
        "",
        f"| sessions | {b_name} tok/s | {c_name} tok/s | speedup | {b_name} user tok/s | {c_name} user tok/s "
        f"| TTFT p95 ms ({b_name} → {c_name}) | TPOT p95 ms | E2EL p95 s | failed |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for sessions in common:
        b, c = baseline.levels[sessions], candidate.levels[sessions]
        rows.append(
            f"| {sessions} | {_f(_get(b, 'output_tok_s'))} | {_f(_get(c, 'output_tok_s'))} "
            f"| **{_ratio(_get(c, 'output_tok_s'), _get(b, 'output_tok_s'))}** "
            f"| {_f(_get(b, 'per_user_tok_s', 'mean'))} | {_f(_get(c, 'per_user_tok_s', 'mean'))} "
            f"| {_f(_get(b, 'ttft_ms', 'p95'), 0)} → {_f(_get(c, 'ttft_ms', 'p95'), 0)} "
            f"| {_f(_get(b, 'tpot_ms', 'p95'))} → {_f(_get(c, 'tpot_ms', 'p95'))} "
            f"| {_f(_get(b, 'e2el_s', 'p95'), 2)} → {_f(_get(c, 'e2el_s', 'p95'), 2)} "
            f"| {b.get('failed', 0)} / {c.get('failed', 0)} |"
        )
    rows += [
        "",
        "tok/s: aggregate output tokens per second over the measured window. user tok/s: mean of 1/TPOT per request.",
        "",
    ]
    return "\n".join(rows)


def _acceptance_table(runs: list[Run]) -> str:
    rows = ["## Speculative decoding (from /metrics deltas after warmup)", ""]
    body = []
    for run in runs:
        for sessions, level in sorted(run.levels.items()):
            spec = level.get("spec_decode")
            if not spec:
                body.append(f"| {run.name} | {sessions} | — | — | no speculation ({level.get('spec_decode_status')}) |")
                continue
            per_pos = ", ".join(f"{p:.3f}" for p in spec.get("per_position") or [])
            body.append(
                f"| {run.name} | {sessions} | {spec['acceptance_rate']:.3f} | {spec['acceptance_length']:.2f} | {per_pos} |"
            )
    rows += ["| run | sessions | acceptance rate | mean acceptance length τ | per position |", "|---|---:|---:|---:|---|"]
    rows += body
    rows.append("")
    return "\n".join(rows)


def _sources(runs: list[Run]) -> str:
    rows = ["## Sources", ""]
    for run in runs:
        doc = run.document
        server = doc.get("server") or {}
        tool = doc.get("tool") or {}
        rows.append(
            f"- **{run.name}**: `{run.path}` — server {server.get('version') or 'unknown'}, "
            f"model {doc.get('settings', {}).get('model')}, started {doc.get('run', {}).get('started_at')}, "
            f"tool {tool.get('version')} ({tool.get('git_revision') or 'no git revision'})"
        )
    rows.append("")
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compare_results.py",
        description="Compare benchmark result files at matched concurrency: markdown table (speedup per level) "
        "and PNG plots. The first file is the baseline.",
        epilog="example: compare_results.py results/baseline.json results/dflash.json --markdown report.md --plots plots/",
    )
    parser.add_argument("results", nargs="+", type=Path, help="result JSON files; the first is the baseline")
    parser.add_argument("--markdown", type=Path, default=None, help="write the markdown report here (default: stdout)")
    parser.add_argument("--plots", type=Path, default=None, help="write PNG plots into this directory (needs matplotlib)")
    parser.add_argument(
        "--allow-mismatch", action="store_true", help="compare runs with different workloads anyway (flagged loudly)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        runs = load_runs(args.results)
        markdown = render_markdown(runs, allow_mismatch=args.allow_mismatch)
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
        from kimi_dflash.bench.report import write_text_atomic

        write_text_atomic(args.markdown, markdown)
        print(f"markdown written to {args.markdown}", file=sys.stderr)
    for path in written:
        print(f"plot written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
