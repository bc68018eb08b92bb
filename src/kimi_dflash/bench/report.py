"""The lines printed during a run (tables, warnings, progress, summary) and the result's tool block."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from kimi_dflash.bench import columns
from kimi_dflash.bench.goodput import describe
from kimi_dflash.bench.records import CANCELLED, RequestRecord
from kimi_dflash.bench.request_shaping import redact_header_arg
from kimi_dflash.bench.result import BenchmarkResult, LevelResult, ToolInfo
from kimi_dflash.core import redaction
from kimi_dflash.core.formatting import interval, number, percent, seconds

TOOL_NAME = "benchmark_multi_turn"
# HEAD as a full hash (--exclude='*': no tag names), "-dirty" when tracked files changed (untracked ones ignored)
GIT_DESCRIBE = ("git", "describe", "--always", "--abbrev=40", "--dirty=-dirty", "--exclude=*")


def redact_argv(argv: list[str]) -> list[str]:
    """The command line as it may be stored and shown: core/redaction.py's rules plus credential --header values."""
    out: list[str] = []
    header_next = False
    for arg in redaction.redact_argv(argv):
        flag, eq, value = arg.partition("=")
        if header_next:
            arg = redact_header_arg(arg)
        elif flag == "--header" and eq:
            arg = f"--header={redact_header_arg(value)}"
        elif flag != "--header":
            arg = redaction.redact_query(arg)
        header_next = not header_next and arg == "--header"
        out.append(arg)
    return out


def git_revision() -> str | None:
    """HEAD of the checkout this code runs from (+ "-dirty" when tracked files changed), or None outside one."""
    try:
        here = Path(__file__).resolve().parent
        found = subprocess.run(GIT_DESCRIBE, cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (found.stdout.strip() or None) if found.returncode == 0 else None


def tool_info(event_loop: str) -> ToolInfo:
    from kimi_dflash import __version__

    def version_of(module: str) -> str | None:
        return getattr(sys.modules.get(module), "__version__", None)

    return ToolInfo(
        name=TOOL_NAME,
        version=__version__,
        git_revision=git_revision(),
        python=platform.python_version(),
        aiohttp=version_of("aiohttp"),
        numpy=version_of("numpy"),
        event_loop=event_loop,
        host=socket.gethostname(),
    )


# -- stdout -------------------------------------------------------------------------------------


def print_level(result: LevelResult, out: TextIO) -> None:
    lines = columns.stdout_table(columns.STDOUT, [result])
    lines += columns.stdout_table(columns.TURNS, result.per_turn, prefix="  per turn:  ")
    lines += [f"  {line}" for line in summary_lines(result)]
    if result.spec_per_request is not None:
        from kimi_dflash.bench.spec_summary import table_lines  # imports metrics (numpy): only when there is one

        lines += table_lines(result.spec_per_request)
    lines += [f"  WARNING: {line}" for line in level_warnings(result)]
    print("\n".join(lines) + "\n", file=out)


def summary_lines(level: LevelResult) -> list[str]:
    """Extra lines for the printed level table: open-loop queueing, SLO attainment, intervals."""
    lines = []
    ol = level.open_loop
    if ol is not None:
        queue = ol.queue_delay_ms
        lines.append(
            f"open loop: {ol.sessions_started} conversations, achieved {number(ol.achieved_rate, 2, '/s')}, max in "
            f"flight {ol.max_in_flight}; local queueing p50/p99 {number(queue.p50)}/{number(queue.p99)} ms"
            f" (cap wait p99 {number(ol.cap_wait_ms.p99)}, timer lag p99 {number(ol.schedule_lag_ms.p99)})"
        )
    gp = level.goodput
    if gp is not None and gp.attainment is not None:
        lines.append(
            f"SLO ({describe(gp.slo)}): {percent(gp.attainment)} met ({gp.met}/{gp.requests}); goodput "
            f"{number(gp.request_goodput or 0, 2)} req/s, {number(gp.output_goodput or 0)} tok/s"
        )
    ci = level.intervals
    intervals = [(columns.OUTPUT_TOK_S, ci.output_tok_s), (columns.PER_USER["mean"], ci.per_user_tok_s)] if ci else []
    for column, block in intervals:
        if block is not None and block.low is not None and block.high is not None:
            within = f"({percent(block.confidence, 0)} over {block.n} repeats)"
            lines.append(f"{column.header}: {column.fmt(block.mean)} {interval(block.low, block.high, 1)} {within}")
    return lines


def level_warnings(result: LevelResult) -> list[str]:
    notes = []
    if result.partial:
        notes.append("partial level: the run stopped before it finished")
    if result.failed:
        reasons = ", ".join(f"{k}={v}" for k, v in result.failures.items())
        notes.append(f"{result.failed} failed request(s): {reasons}")
    if result.tokens_counted_from_chunks:
        notes.append(
            f"{result.tokens_counted_from_chunks} response(s) had no usage; their tokens were counted as "
            "chunks, which undercounts under speculative decoding"
        )
    util = result.client.cpu_util if result.client else None
    if util is not None and util > 0.7:
        notes.append(f"client CPU at {util:.0%} of one core: the client may be distorting the timings")
    send = result.client_send_ms.p99 if result.client_send_ms else None
    if send is not None and send > 50:
        notes.append(f"the client needed up to {send:.1f} ms (p99) to put a request on the wire: it may be busy")
    status = result.spec_decode_status
    if status in ("no_drafts", "counter_reset", "unavailable"):
        notes.append(f"spec-decode metrics: {status}")
    return notes


def progress_line(label: str, records: Sequence[RequestRecord], total: int, elapsed_s: float) -> str:
    """One line of progress over ``records`` (the requests of the repeat so far) out of ``total``."""
    done = [r for r in records if r.done_time and r.error != CANCELLED]
    failed = sum(1 for r in done if not r.ok)
    tokens = sum(r.output_tokens or 0 for r in done if r.ok)
    rate = number(tokens / elapsed_s if elapsed_s > 0 else None)
    line = f"{label}: {len(done)}/{total} requests done"
    if failed:
        line += f" ({failed} failed)"
    line += f", {rate} tok/s so far, {seconds(elapsed_s)} elapsed"
    if 0 < len(done) < total:
        line += f", about {seconds(elapsed_s * (total - len(done)) / len(done))} left"
    return line


def print_summary(document: BenchmarkResult, out: TextIO) -> None:
    run = document.run
    label = f" [{run.label}]" if run.label else ""
    detail = f" ({run.status_detail})" if run.status_detail else ""
    print(f"== summary{label}: {run.status}{detail}", file=out)
    if not document.results:
        print("   no level finished", file=out)
        return
    for line in columns.stdout_table(columns.STDOUT, document.results):
        print(line, file=out)
    print(
        "   per-user tok/s: 1/TPOT is the decode speed a user sees; N/E2EL includes the wait for the first token.",
        file=out,
    )
