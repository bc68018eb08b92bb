"""Writing the result file (atomically) and the human-readable tables printed during a run.

The file's model, its schema version and the loader every reader uses are in ``result.py``.
"""

from __future__ import annotations

import json
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from kimi_dflash.bench.level_extras import level_name, summary_lines
from kimi_dflash.bench.request_shaping import redact_header_arg
from kimi_dflash.bench.result import BenchmarkResult, Distribution, LevelResult, ToolInfo
from kimi_dflash.core import redaction
from kimi_dflash.core.atomic_write import write_text_atomic

TOOL_NAME = "benchmark_multi_turn"

SECRET_FLAGS = redaction.SECRET_OPTIONS


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with secrets replaced, so it can be stored and shown: secret options in any spelling and
    URL credentials and secret query parameters (bench/redaction.py), and the values of credential --header lines
    (bench/request_shaping.py)."""
    out: list[str] = []
    header_next = False
    for arg in redaction.redact_argv(argv, SECRET_FLAGS):
        if header_next:
            out.append(redact_header_arg(arg))
            header_next = False
            continue
        flag, eq, value = arg.partition("=")
        if flag == "--header":
            out.append(f"--header={redact_header_arg(value)}" if eq else arg)
            header_next = not eq
            continue
        out.append(redaction.redact_query(arg))
    return out


def git_revision(start: Path | None = None) -> str | None:
    """HEAD of the checkout this code runs from (+ "-dirty"), or None outside a git checkout."""
    here = (start or Path(__file__)).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=False
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def tool_info(event_loop: str) -> ToolInfo:
    from kimi_dflash import __version__

    def version_of(module: str) -> str | None:
        mod = sys.modules.get(module)
        return getattr(mod, "__version__", None) if mod else None

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


def to_json_text(document: Any) -> str:
    """JSON data or a result as the text written to disk (NaN/Infinity refused: they are not JSON)."""
    if isinstance(document, BenchmarkResult):
        document = document.to_json()
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_atomic(path: Path, document: Any) -> None:
    """JSON data or a result, written atomically."""
    write_text_atomic(path, to_json_text(document))


# -- stdout -------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _stat(block: Distribution | None, key: str, digits: int = 1) -> str:
    return _fmt(getattr(block, key) if block is not None else None, digits)


LEVEL_COLUMNS = (
    ("sessions", 8),
    ("ok/fail", 9),
    ("out tok/s", 10),
    ("req/s", 7),
    ("TTFT p50/p95 ms", 17),
    ("TPOT p50/p95 ms", 16),
    ("user tok/s 1/TPOT", 18),
    ("N/E2EL", 7),
    ("E2EL p95 s", 11),
    ("tok/chunk", 10),
    ("accept", 7),
    ("tau", 5),
)


def level_header() -> str:
    return "  ".join(name.rjust(width) for name, width in LEVEL_COLUMNS)


def level_row(result: LevelResult) -> str:
    spec = result.spec_decode
    cells = [
        level_name(result) + ("*" if result.partial else ""),
        f"{result.completed}/{result.failed}",
        _fmt(result.output_tok_s),
        _fmt(result.request_throughput, 2),
        f"{_stat(result.ttft_ms, 'p50', 0)}/{_stat(result.ttft_ms, 'p95', 0)}",
        f"{_stat(result.tpot_ms, 'p50')}/{_stat(result.tpot_ms, 'p95')}",
        _stat(result.per_user_tok_s, "mean"),
        _stat(result.per_user_tok_s_e2el, "mean"),
        _stat(result.e2el_s, "p95", 2),
        _stat(result.tokens_per_chunk, "mean", 2),
        _fmt(spec.acceptance_rate if spec else None, 3),
        _fmt(spec.acceptance_length if spec else None, 2),
    ]
    return "  ".join(cell.rjust(width) for cell, (_, width) in zip(cells, LEVEL_COLUMNS))


def print_level(result: LevelResult, out: TextIO) -> None:
    print(level_header(), file=out)
    print(level_row(result), file=out)
    print("  per turn:  turn  ok  prompt tok  TTFT p50 ms  TPOT p50 ms  E2EL p50 s", file=out)
    for row in result.per_turn:
        print(
            f"            {row.turn:>4}  {row.completed:>2}  {_stat(row.prompt_tokens, 'mean', 0):>10}"
            f"  {_stat(row.ttft_ms, 'p50', 0):>11}  {_stat(row.tpot_ms, 'p50'):>11}"
            f"  {_stat(row.e2el_s, 'p50', 2):>10}",
            file=out,
        )
    for line in summary_lines(result):
        print(f"  {line}", file=out)
    if result.spec_per_request is not None:
        from kimi_dflash.bench.spec_summary import table_lines  # imports metrics (numpy): only when there is one

        for line in table_lines(result.spec_per_request):
            print(line, file=out)
    for line in level_warnings(result):
        print(f"  WARNING: {line}", file=out)
    print(file=out)


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


def print_summary(document: BenchmarkResult, out: TextIO) -> None:
    run = document.run
    label = f" [{run.label}]" if run.label else ""
    detail = f" ({run.status_detail})" if run.status_detail else ""
    print(f"== summary{label}: {run.status}{detail}", file=out)
    if not document.results:
        print("   no level finished", file=out)
        return
    print(level_header(), file=out)
    for result in document.results:
        print(level_row(result), file=out)
    print(
        "   per-user tok/s: 1/TPOT is the decode speed a user sees; N/E2EL includes the wait for the first token.",
        file=out,
    )
