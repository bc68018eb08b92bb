"""Validate FP8 KV against BF16 KV on two servers the user started (docs/fp8-kv.md)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.bench.result import load_result
from kimi_dflash.core.atomic_write import check_target
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.formatting import number
from kimi_dflash.core.options import declare, http_url, option, run
from kimi_dflash.core.user_files import read_log_tail
from kimi_dflash.documents import Document, Model
from kimi_dflash.validate import engine
from kimi_dflash.validate.client import ServerError, api_key_from_env

# The benchmark as users run it (payload/benchmark_multi_turn.py is a wrapper around the same entry point).
BENCHMARK_COMMAND = (sys.executable, "-m", "kimi_dflash.bench")
_KV_SIZE = re.compile(r"KV cache size:\s*([\d,]+)\s*tokens")


def kv_capacity_from_log(text: str) -> int | None:
    """The last 'KV cache size: N tokens' line of a vLLM log (GPU and CPU builds both print it)."""
    found = _KV_SIZE.findall(text)
    return int(found[-1].replace(",", "")) if found else None


@dataclass(frozen=True)
class Thresholds:
    max_math_drop_points: float = 5.0  # FP8 accuracy may trail BF16 by at most this many points
    min_prefix_agreement: float = 0.5  # mean fraction of the greedy output shared with BF16
    min_capacity_ratio: float = 1.8  # FP8 halves bytes per token: expect ~2x tokens


def verdict_lines(
    agreement: engine.AgreementSummary,
    math_bf16: float,
    math_fp8: float,
    capacity: tuple[int | None, int | None],
    thresholds: Thresholds,
) -> engine.Verdict:
    """PASS, WARN or FAIL with the reasons. FAIL = FP8 changes answers; WARN = weaker evidence or missing facts."""
    problems: list[tuple[engine.Status, str]] = []
    drop, limit = (math_bf16 - math_fp8) * 100, thresholds.max_math_drop_points
    if drop > limit:
        why = f"math accuracy drops {drop:.1f} points with FP8 KV (limit {limit:g}); check the KV scales"
        problems.append(("FAIL", why))
    if (shared := agreement.mean_prefix_agreement * 100) < (expected := thresholds.min_prefix_agreement * 100):
        why = f"FP8 outputs share only {shared:.0f}% of their greedy prefix with BF16 (expect >= {expected:.0f}%)"
        problems.append(("WARN", why))
    bf16_tokens, fp8_tokens = capacity
    if not (bf16_tokens and fp8_tokens):
        problems.append(("WARN", "KV capacity unknown: pass --bf16-log and --fp8-log (the servers' logs)"))
    elif (ratio := fp8_tokens / bf16_tokens) < thresholds.min_capacity_ratio:
        fix = "is --kv-cache-dtype fp8 set on the FP8 server?"
        problems.append(("WARN", f"FP8 KV holds only {ratio:.2f}x the BF16 tokens (expect ~2x): {fix}"))
    return engine.Verdict.of(problems)


class Fp8Summary(Document):
    """The FP8 KV verdict and its evidence (qualify's fp8.json)."""

    SCHEMA = "kimi-dflash/fp8-summary"
    WHAT = "FP8 KV summary"
    verdict: engine.Status
    reasons: list[str]
    math_bf16: float
    math_fp8: float
    kv_capacity_bf16: int | None
    kv_capacity_fp8: int | None


class BenchSummary(Model):
    """The headline figures of one benchmark run (its last level), or why there are none."""

    status: str  # "ok" or "exit N"
    command: list[str]
    output: str
    sessions: int | None = None
    output_tok_s: float | None = None
    completed: int | None = None
    failed: int | None = None
    detail: str = ""


class MathRowDoc(Model):
    id: str
    answer: int
    bf16: int | None
    fp8: int | None


class MathSummary(Model):
    accuracy_bf16: float
    accuracy_fp8: float
    rows: list[MathRowDoc]


class Fp8Report(Document):
    """validate-fp8 --json: every per-prompt comparison, the math rows, capacity, benchmarks and the verdict."""

    SCHEMA = "kimi-dflash/fp8-validation"
    WHAT = "FP8 KV validation report"
    servers: dict[str, str]
    models: list[str]
    agreement: engine.AgreementSummary
    pairs: list[engine.PairComparison]
    math: MathSummary
    kv_capacity_tokens: dict[str, int | None]
    benchmark: dict[str, BenchSummary] | None
    verdict: engine.Status
    reasons: list[str]


def run_benchmark(url: str, sessions: int, label: str, output: Path, extra: Sequence[str]) -> BenchSummary:
    command = [*BENCHMARK_COMMAND, "--base-url", url, "--sessions", str(sessions), "--label", label]
    command += ["--output", str(output), *extra]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    status = "ok" if result.returncode == 0 else f"exit {result.returncode}"
    try:
        levels = load_result(output).results
    except UserError:
        levels = []
    if not levels:
        detail = (result.stderr.strip().splitlines() or ["no result"])[-1]
        return BenchSummary(status=status, command=command, output=str(output), detail=detail)
    figures = {name: getattr(levels[-1], name) for name in ("sessions", "output_tok_s", "completed", "failed")}
    return BenchSummary(status=status, command=command, output=str(output), **figures)


def benchmark_line(name: str, result: BenchSummary) -> str:
    if result.output_tok_s is not None:
        return (
            f"benchmark {name:<5}     {result.output_tok_s:.1f} output tok/s at {result.sessions} sessions "
            f"({result.completed} ok, {result.failed} failed)"
        )
    return f"benchmark {name:<5}     {result.status}: {result.detail}"


@dataclass(kw_only=True)
class ValidateFp8Options:
    bf16_url: str = option("server with BF16 KV (the reference)", required=True, parse=http_url)
    fp8_url: str = option("server with FP8 KV", required=True, parse=http_url)
    bf16_log: Path | None = option("BF16 server log (for KV capacity)")
    fp8_log: Path | None = option("FP8 server log (for KV capacity)")
    prompts: int = option("agreement prompts, from the shipped set (24)", default=24)
    max_tokens: int = option("tokens per agreement prompt (128)", default=128)
    math_max_tokens: int = option("tokens per math answer (384)", default=384)
    no_math: bool = option("skip the math accuracy check")
    concurrency: int = option("parallel requests per server (8)", default=8)
    bench_concurrency: int | None = option("also run the benchmark at this concurrency (use the config's MAX_NUM_SEQS)")
    bench_arg: list[str] = option("extra benchmark argument, e.g. --bench-arg=--max-tokens=512", repeatable=True)
    bench_dir: Path | None = option("where the benchmark result JSONs go (results/)")
    json: Path | None = option("write every per-prompt result here")
    max_math_drop: float = option("FAIL above this FP8 math drop, points (5)", default=Thresholds.max_math_drop_points)


add_cli_args = declare(
    ValidateFp8Options,
    "Compare an FP8-KV server with a BF16-KV server of the same model: greedy token agreement, exact-match math "
    "accuracy, KV capacity and (optionally) throughput; print a verdict.",
    "Example: validate-fp8.sh --bf16-url http://127.0.0.1:8000 --fp8-url http://127.0.0.1:8001 --bf16-log bf16.log "
    "--fp8-log fp8.log --bench-concurrency 64. Exit status: 0 PASS, 1 WARN, 2 FAIL, 3 error. The API key, if any, "
    "is read from OPENAI_API_KEY.",
)


def main(args: ValidateFp8Options) -> int:
    api_key = api_key_from_env()
    urls = (args.bf16_url, args.fp8_url)
    try:  # what can be refused is, before the servers are asked for anything
        bf16_tokens, fp8_tokens = (kv_capacity_from_log(read_log_tail(log)) for log in (args.bf16_log, args.fp8_log))
        if args.json:
            check_target(args.json, "--json ")
        c = asyncio.run(engine.collect(args, *engine.served(urls, (None, None), api_key), api_key, divergence=False))
        math = MathSummary(accuracy_bf16=0.0, accuracy_fp8=0.0, rows=[])
        if (score := c.math) is not None:
            rows = [MathRowDoc(id=r.id, answer=r.answer, bf16=r.reference, fp8=r.candidate) for r in score.rows]
            math = MathSummary(accuracy_bf16=score.accuracy_reference, accuracy_fp8=score.accuracy_candidate, rows=rows)
        bench = None
        if args.bench_concurrency:
            sessions, extra, directory = args.bench_concurrency, args.bench_arg, args.bench_dir or Path("results")
            labels = {name: (url, f"validate-fp8-{name}") for name, url in zip(("bf16", "fp8"), urls)}
            bench = {
                n: run_benchmark(u, sessions, lab, directory / f"{lab}.json", extra) for n, (u, lab) in labels.items()
            }
    except (ServerError, UserError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 3

    thresholds = Thresholds(max_math_drop_points=float("inf") if args.no_math else args.max_math_drop)
    capacity = (bf16_tokens, fp8_tokens)
    status, reasons = verdict_lines(c.agreement, math.accuracy_bf16, math.accuracy_fp8, capacity, thresholds)
    report = Fp8Report(
        servers={"bf16": urls[0], "fp8": urls[1]},
        models=[c.reference.model, c.candidate.model],
        pairs=c.pairs,
        agreement=c.agreement,
        math=math,
        kv_capacity_tokens={"bf16": bf16_tokens, "fp8": fp8_tokens},
        benchmark=bench,
        verdict=status,
        reasons=reasons,
    )
    print("\n".join(report_lines(report, args.max_tokens, math_run=not args.no_math)))
    try:
        if args.json:
            report.save(args.json)
    except OSError as error:
        print(f"error: cannot write --json {args.json}: {error.strerror or error}", file=sys.stderr)
        return 3
    return {"PASS": 0, "WARN": 1, "FAIL": 2}[status]


def report_lines(report: Fp8Report, max_tokens: int, math_run: bool = True) -> list[str]:
    def tokens(value: int | None) -> str:
        return number(value, 0, grouped=True) if value else "unknown"

    agreement, math = report.agreement, report.math
    bf16, fp8 = report.kv_capacity_tokens.get("bf16"), report.kv_capacity_tokens.get("fp8")
    median = agreement.median_first_divergence
    lines = [
        f"FP8 KV validation   bf16: {report.models[0]}   fp8: {report.models[1]}",
        f"token agreement     {agreement.identical}/{agreement.prompts} greedy outputs identical ({max_tokens} "
        f"tokens); mean shared prefix {agreement.mean_prefix_agreement * 100:.0f}%",
        "first divergence    none"
        if median is None
        else f"first divergence    median token {median:g}, earliest {agreement.earliest_divergence}",
    ]
    if math_run:
        accuracy = f"bf16 {math.accuracy_bf16 * 100:.1f}%  fp8 {math.accuracy_fp8 * 100:.1f}%"
        lines.append(f"math exact-match    {accuracy}  ({len(math.rows)} problems)")
    ratio = f"  ({fp8 / bf16:.2f}x)" if bf16 and fp8 else ""
    lines.append(f"KV capacity         bf16 {tokens(bf16)} tokens  fp8 {tokens(fp8)} tokens{ratio}")
    if report.benchmark is None:
        lines.append("benchmark           not run (pass --bench-concurrency N)")
    else:
        lines.extend(benchmark_line(name, result) for name, result in report.benchmark.items())
    return [*lines, f"verdict             {report.verdict}", *(f"  {reason}" for reason in report.reasons)]


if __name__ == "__main__":
    sys.exit(run(__name__, prog="validate-fp8.sh"))
