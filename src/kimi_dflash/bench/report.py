"""The result file (versioned JSON, written atomically) and the human-readable tables.

Schema: docs/benchmark.md. Bump SCHEMA_VERSION when a field changes meaning or disappears; adding
fields keeps the version. Readers (``compare``) refuse versions they do not know.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from kimi_dflash.bench.errors import UserError

SCHEMA = "kimi-dflash/benchmark-result"
SCHEMA_VERSION = 1
TOOL_NAME = "benchmark_multi_turn"

SECRET_FLAGS = ("--api-key",)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with secrets replaced, so it can be stored and shown."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        flag, eq, _value = arg.partition("=")
        if flag in SECRET_FLAGS:
            if eq:
                out.append(f"{flag}=***")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
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


def tool_info(event_loop: str) -> dict[str, Any]:
    from kimi_dflash import __version__

    versions: dict[str, str | None] = {}
    for module in ("aiohttp", "numpy"):
        mod = sys.modules.get(module)
        versions[module] = getattr(mod, "__version__", None) if mod else None
    return {
        "name": TOOL_NAME,
        "version": __version__,
        "git_revision": git_revision(),
        "python": platform.python_version(),
        **versions,
        "event_loop": event_loop,
        "host": socket.gethostname(),
    }


def build_document(
    tool: dict[str, Any],
    run: dict[str, Any],
    settings: dict[str, Any],
    server: dict[str, Any],
    warmup: dict[str, Any],
    results: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "tool": tool,
        "run": run,
        "settings": settings,
        "server": server,
        "warmup": warmup,
        "results": results,
    }


def write_text_atomic(path: Path, text: str) -> None:
    """Write next to ``path`` and rename into place: readers never see half a file."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_atomic(path: Path, document: dict[str, Any]) -> None:
    """The result document as JSON (NaN/Infinity refused: they are not JSON), written atomically."""
    write_text_atomic(path, json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


# Names every level must carry (docs/benchmark.md); consumers may rely on them.
REQUIRED_LEVEL_KEYS = (
    "sessions", "turns_per_session", "completed", "failed", "output_tokens", "duration_s", "output_tok_s",
    "ttft_ms", "tpot_ms", "e2el_s", "per_user_tok_s", "spec_decode",
)  # fmt: skip
DISTRIBUTION_KEYS = ("ttft_ms", "tpot_ms", "e2el_s", "per_user_tok_s")
STAT_KEYS = ("mean", "p50", "p95", "p99")
REQUIRED_TOP_KEYS = ("schema", "schema_version", "tool", "run", "settings", "server", "results")


def validate_document(document: Any) -> list[str]:
    """Problems with a result document (empty list: valid). Checks the names the schema promises."""
    problems: list[str] = []
    if not isinstance(document, dict):
        return ["document is not a JSON object"]
    problems += [f"missing top-level key {k!r}" for k in REQUIRED_TOP_KEYS if k not in document]
    if document.get("schema") != SCHEMA:
        problems.append(f"schema is {document.get('schema')!r}, expected {SCHEMA!r}")
    if document.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version is {document.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    for key in ("version", "git_revision", "name"):
        if key not in (document.get("tool") or {}):
            problems.append(f"tool.{key} missing")
    for key in ("label", "started_at", "status", "command_line"):
        if key not in (document.get("run") or {}):
            problems.append(f"run.{key} missing")
    results = document.get("results")
    if not isinstance(results, list):
        return problems + ["results is not a list"]
    for i, level in enumerate(results):
        where = f"results[{i}]"
        if not isinstance(level, dict):
            problems.append(f"{where} is not an object")
            continue
        problems += [f"{where}.{k} missing" for k in REQUIRED_LEVEL_KEYS if k not in level]
        for key in DISTRIBUTION_KEYS:
            block = level.get(key)
            if not isinstance(block, dict) or any(s not in block for s in STAT_KEYS):
                problems.append(f"{where}.{key} must be an object with {', '.join(STAT_KEYS)}")
        spec = level.get("spec_decode")
        if spec is not None and (
            not isinstance(spec, dict) or any(k not in spec for k in ("acceptance_rate", "acceptance_length", "per_position"))
        ):
            problems.append(f"{where}.spec_decode must be null or have acceptance_rate, acceptance_length, per_position")
    return problems


def load_document(path: Path) -> dict[str, Any]:
    """Read a result file, refusing anything that is not a known version of our schema."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such result file.") from None
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc}).") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise UserError(f"{path}: not a benchmark result (expected \"schema\": \"{SCHEMA}\").")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UserError(
            f"{path}: schema_version {version!r}; this tool reads version {SCHEMA_VERSION}. "
            "Use the tool version that wrote it."
        )
    problems = validate_document(document)
    if problems:
        raise UserError(f"{path}: not a valid result file: {'; '.join(problems[:5])}.")
    return document


# -- stdout -------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _stat(block: dict[str, Any] | None, key: str, digits: int = 1) -> str:
    return _fmt(block.get(key) if block else None, digits)


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


def level_row(result: dict[str, Any]) -> str:
    spec = result.get("spec_decode") or {}
    cells = [
        str(result["sessions"]) + ("*" if result.get("partial") else ""),
        f"{result['completed']}/{result['failed']}",
        _fmt(result.get("output_tok_s")),
        _fmt(result.get("request_throughput"), 2),
        f"{_stat(result['ttft_ms'], 'p50', 0)}/{_stat(result['ttft_ms'], 'p95', 0)}",
        f"{_stat(result['tpot_ms'], 'p50')}/{_stat(result['tpot_ms'], 'p95')}",
        _stat(result["per_user_tok_s"], "mean"),
        _stat(result["per_user_tok_s_e2el"], "mean"),
        _stat(result["e2el_s"], "p95", 2),
        _stat(result["tokens_per_chunk"], "mean", 2),
        _fmt(spec.get("acceptance_rate"), 3),
        _fmt(spec.get("acceptance_length"), 2),
    ]
    return "  ".join(cell.rjust(width) for cell, (_, width) in zip(cells, LEVEL_COLUMNS))


def print_level(result: dict[str, Any], out: TextIO) -> None:
    print(level_header(), file=out)
    print(level_row(result), file=out)
    print("  per turn:  turn  ok  prompt tok  TTFT p50 ms  TPOT p50 ms  E2EL p50 s", file=out)
    for row in result["per_turn"]:
        print(
            f"            {row['turn']:>4}  {row['completed']:>2}  {_stat(row['prompt_tokens'], 'mean', 0):>10}"
            f"  {_stat(row['ttft_ms'], 'p50', 0):>11}  {_stat(row['tpot_ms'], 'p50'):>11}  {_stat(row['e2el_s'], 'p50', 2):>10}",
            file=out,
        )
    for line in level_warnings(result):
        print(f"  WARNING: {line}", file=out)
    print(file=out)


def level_warnings(result: dict[str, Any]) -> list[str]:
    notes = []
    if result.get("partial"):
        notes.append("partial level: the run stopped before it finished")
    if result["failed"]:
        reasons = ", ".join(f"{k}={v}" for k, v in result["failures"].items())
        notes.append(f"{result['failed']} failed request(s): {reasons}")
    if result.get("tokens_counted_from_chunks"):
        notes.append(
            f"{result['tokens_counted_from_chunks']} response(s) had no usage; their tokens were counted as "
            "chunks, which undercounts under speculative decoding"
        )
    util = (result.get("client") or {}).get("cpu_util")
    if util is not None and util > 0.7:
        notes.append(f"client CPU at {util:.0%} of one core: the client may be distorting the timings")
    send = (result.get("client_send_ms") or {}).get("p99")
    if send is not None and send > 50:
        notes.append(f"the client needed up to {send:.1f} ms (p99) to put a request on the wire: it may be busy")
    status = result.get("spec_decode_status")
    if status in ("no_drafts", "counter_reset", "unavailable"):
        notes.append(f"spec-decode metrics: {status}")
    return notes


def print_summary(document: dict[str, Any], out: TextIO) -> None:
    run = document["run"]
    label = f" [{run['label']}]" if run.get("label") else ""
    print(f"== summary{label}: {run['status']}" + (f" ({run['status_detail']})" if run.get("status_detail") else ""), file=out)
    if not document["results"]:
        print("   no level finished", file=out)
        return
    print(level_header(), file=out)
    for result in document["results"]:
        print(level_row(result), file=out)
    print("   per-user tok/s: 1/TPOT is the decode speed a user sees; N/E2EL includes the wait for the first token.", file=out)
