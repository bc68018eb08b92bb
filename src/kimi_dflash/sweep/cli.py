"""Command line of the sweep launcher (launchers/kimi26-vllm-dflash-sweep.sh is a thin wrapper)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from kimi_dflash.bench import cli as bench_cli
from kimi_dflash.bench.request_shaping import is_credential, redact_header_arg
from kimi_dflash.config.shipped import resolve_config_argument
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.options import comma_list, declare, option, parse
from kimi_dflash.core.redaction import split_secret
from kimi_dflash.launch.serve_sh import SERVE_COMMAND, ServerLeftRunning
from kimi_dflash.runs.orchestrator import Interrupted, run_in_directory
from kimi_dflash.sweep import aggregate, state
from kimi_dflash.sweep.grid import parse_axis, points
from kimi_dflash.sweep.points import PointPlan, run_points

# The sweep sets these for every point; the benchmark options that remain are passed through unchanged.
OWNED_BENCH_OPTIONS = ("--base-url", "--sessions", "--output", "--label", "--metrics-url", "--model")

EPILOG = """\
Every other option is passed to the benchmark (kimi-dflash bench --help), e.g. --max-tokens 64 --warmup 4.
NUM_SPECULATIVE_TOKENS=0 is the baseline each point is compared with; a rerun finishes what is not complete
(docs/workflows.md: what DIR holds, how a failed start or stop is handled, one sweep per DIR at a time).

examples:
  %(prog)s configs/demo-cpu.env --grid NUM_SPECULATIVE_TOKENS=0,2,4 --sessions 2,4 --out results/sweep \\
      --max-tokens 64 --turns-per-session 2
  %(prog)s configs/production.env --grid NUM_SPECULATIVE_TOKENS=0,1,2,4 --grid MAX_NUM_SEQS=32,64 \\
      --sessions 8,16,32,64 --out results/k-sweep --dry-run
  kimi-dflash advise results/sweep                         # which k to run at each concurrency

exit status: 0 every point finished; 1 some point failed (see DIR/*.failed.json), a server could not be
stopped, or another sweep is using DIR; 2 bad arguments; 130/143 interrupted (rerun the same command to finish).
"""


@dataclass(kw_only=True)
class SweepOptions:
    ABBREVIATIONS: ClassVar[bool] = False

    config: str = option(
        "config every point starts from: a path, or a shipped config's name (demo-cpu)", positional=True, required=True
    )
    grid: list[str] = option(
        "config key and its values (repeat for more keys: the grid is their product)",
        repeatable=True,
        metavar="KEY=v1,v2",
    )
    sessions: tuple[int, ...] = option(
        "concurrency levels measured at every point, e.g. 2,4",
        required=True,
        parse=comma_list(int, "positive integers", minimum=1),
    )
    out: Path = option("directory for the results (resumable)", required=True)
    dry_run: bool = option("print the points and what is finished, run nothing")
    no_plots: bool = option("skip the PNG plots (no matplotlib needed)")
    # Tests substitute a stand-in for serve.sh; normally the sweep runs serve.sh's own entry point in this interpreter.
    serve_sh: Path | None = option(hidden=True)
    bench: list[str] = option(rest=True)  # every other option: the benchmark's


add_cli_args = declare(
    SweepOptions,
    "Sweep server configurations x concurrency: one benchmark result per point, an aggregate table at matched "
    "concurrency, and plots (tok/s vs concurrency; aggregate vs per-user tok/s, Pareto front).",
    EPILOG,
)


def _bench_args(extra: list[str]) -> list[str]:
    """The benchmark options every point gets, validated; the API key is not among them (see main)."""
    for arg in extra:
        if arg.split("=", 1)[0] in OWNED_BENCH_OPTIONS:
            raise UserError(f"{arg.split('=', 1)[0]} is set by the sweep for every point; leave it out.")
    try:
        bench = parse(bench_cli, [*extra, "--sessions", "1"])
    except SystemExit:
        raise UserError(f"benchmark options {' '.join(extra)!r} are not valid (see the message above).") from None
    # sweep.json keeps the benchmark options (resume needs them verbatim): a credential header would be stored.
    for value in bench.header:
        if is_credential(value.partition(":")[0]):
            raise UserError(
                f"--header {redact_header_arg(value)!r}: a sweep stores its benchmark options in sweep.json, so it "
                "takes no credential header; give the key as --api-key (sent as 'Authorization: Bearer', never stored)."
            )
    return extra


def write_aggregate(out: Path, plots: bool, server_left: str = "") -> Path:
    results = [(path.stem, result) for path, result in state.finished_results(out)]
    found = aggregate.cells(results)
    summary = out / aggregate.SUMMARY_FILE
    header = f"# Sweep results ({len(results)} points)\n\n"
    if server_left:
        header += f"**A server is still running: {server_left}**\n\n"
    header += "Output tok/s compared only at equal concurrency.\n\n"
    write_text_atomic(summary, header + aggregate.render_table(found, state.read_failures(out)))
    if plots and found:
        aggregate.write_plots(found, out)
    return summary


def main(args: SweepOptions) -> int:
    # The key (any spelling) reaches each benchmark by its environment only: never sweep.json, a log or argv.
    extra, api_key = split_secret(args.bench)
    config_as_given = args.config
    if not (config := resolve_config_argument(args.config)).is_file():
        raise UserError(f"{config_as_given}: no such config file (nor a shipped config of that name).")
    if args.serve_sh is not None and not args.serve_sh.is_file():
        raise UserError(f"{args.serve_sh}: no such file")
    plan = PointPlan(
        config=config.resolve(),
        serve_command=SERVE_COMMAND if args.serve_sh is None else (str(args.serve_sh.resolve()),),
        points=points([parse_axis(g) for g in args.grid]),
        sessions=args.sessions,
        bench_args=_bench_args(extra),
        api_key=api_key,
        out=args.out,
        config_as_given=config_as_given,
    )
    if args.dry_run:
        print("\n".join(describe(plan)))
        return 0
    signature = state.SweepSignature(
        config=str(plan.config), grid=args.grid, sessions=list(plan.sessions), benchmark_options=plan.bench_args
    )
    fresh = state.SweepState(signature=signature).at(plan.out)
    return run_in_directory(fresh, lambda s: _run(plan, s, not args.no_plots), "sweep", "rerun the same command")


def _run(plan: PointPlan, run_state: state.SweepState, plots: bool) -> int:
    try:
        tally = run_points(plan, run_state)
    except (KeyboardInterrupt, Interrupted):
        write_aggregate(plan.out, plots=False)
        raise
    except ServerLeftRunning as exc:
        summary = write_aggregate(plan.out, plots=False, server_left=str(exc))
        then = "once that server is stopped, rerun the same command to finish"
        print(f"error: {exc}\nsweep: stopped here; {then} (table in {summary})", file=sys.stderr)
        return 1
    summary = write_aggregate(plan.out, plots=plots)
    print(summary.read_text(encoding="utf-8"))
    ran = f"{tally.ran} points run now ({tally.failed} failed), {tally.kept} already finished"
    print(f"sweep: {ran}; table in {summary}", file=sys.stderr)
    return 1 if tally.failed else 0


def describe(plan: PointPlan) -> list[str]:
    lines = [f"sweep of {plan.config}: {len(plan.points)} server points x sessions {','.join(map(str, plan.sessions))}"]
    for index, point in enumerate(plan.points, start=1):
        done = "finished" if state.finished_result(plan.out, point) else "to run"
        env = " ".join(f"{k}={v}" for k, v in plan.env(point).items()) or "(no overrides)"
        lines.append(f"  [{index}] {point.label:<40} serve.sh env: {env:<50} {done}")
    key = "; API key: given (not shown)" if plan.api_key else ""
    lines.append(f"benchmark options: {' '.join(plan.bench_args) or '(defaults)'}{key}; results in {plan.out}")
    return lines
