"""CSV beside the result JSON (``--csv``): one row per request and one row per level, written atomically.

``<output>.requests.csv``: every request of every measured level, times in seconds from the run's clock
origin (as ``--record-requests`` stores them), with its derived latencies, its local queueing (open loop)
and whether it met the SLOs (``--slo``). ``<output>.levels.csv``: the headline figures of each level.
Both are rewritten after every level, like the JSON, so a stopped run leaves complete files.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kimi_dflash.bench.goodput import meets
from kimi_dflash.bench.level_extras import level_name
from kimi_dflash.bench.metrics import e2el, tpot, ttft
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.result import Distribution, LevelResult
from kimi_dflash.core.atomic_write import write_text_atomic

REQUEST_COLUMNS = (
    "level", "request_rate", "repeat", "session", "turn", "scheduled_s", "dispatch_s", "admitted_s", "ready_s",
    "send_s", "first_token_s", "last_token_s", "done_s", "ttft_ms", "tpot_ms", "e2el_s", "output_tokens",
    "prompt_tokens", "token_chunks", "schedule_lag_ms", "cap_wait_ms", "queue_delay_ms", "meets_slo", "error",
    "finish_reason",
)  # fmt: skip

STATS = ("mean", "p50", "p90", "p95", "p99")


def paths_for(output: Path) -> tuple[Path, Path]:
    """``results/x.json`` -> ``results/x.requests.csv``, ``results/x.levels.csv``."""
    stem = output.with_suffix("") if output.suffix == ".json" else output
    return stem.with_name(stem.name + ".requests.csv"), stem.with_name(stem.name + ".levels.csv")


def _num(value: float | None, scale: float = 1.0, digits: int = 6) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return f"{value * scale:.{digits}f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def request_rows(level: LevelResult, records: Sequence[RequestRecord], origin: float) -> list[list[str]]:
    rate = level.open_loop.request_rate if level.open_loop else None
    slo = level.goodput.slo if level.goodput else None
    rows = []
    for r in records:

        def rel(t: float | None) -> str:
            return "" if not t else _num(t - origin)

        rows.append(
            [
                level_name(level), _num(rate), str(r.repeat), str(r.session), str(r.turn),
                rel(r.scheduled_time), rel(r.dispatch_time), rel(r.admitted_time), rel(r.ready_time),
                rel(r.send_time), rel(r.first_token_time), rel(r.last_token_time), rel(r.done_time),
                _num(ttft(r), 1000.0, 3), _num(tpot(r), 1000.0, 3), _num(e2el(r)),
                _num(r.output_tokens), _num(r.prompt_tokens), str(r.token_chunks),
                _num(_diff(r.dispatch_time, r.scheduled_time), 1000.0, 3),
                _num(_diff(r.admitted_time, r.dispatch_time), 1000.0, 3),
                _num(_diff(r.send_time, r.scheduled_time), 1000.0, 3),
                "" if slo is None else str(int(meets(r, slo))), r.error or "", r.finish_reason or "",
            ]
        )  # fmt: skip
    return rows


def _dist_cells(block: Distribution | None, extra: Sequence[str]) -> list[str]:
    cells = [_num(getattr(block, key) if block else None) for key in STATS]
    cells += [_num((block.percentiles or {}).get(key) if block else None) for key in extra]
    return cells


def level_table(levels: Sequence[LevelResult], extra: Sequence[str]) -> tuple[list[str], list[list[Any]]]:
    header = ["level", "sessions", "request_rate", "repeats", "requests", "completed", "failed", "output_tokens",
              "duration_s", "output_tok_s", "request_throughput"]  # fmt: skip
    for name in ("ttft_ms", "tpot_ms", "e2el_s", "per_user_tok_s"):
        header += [f"{name}_{key}" for key in (*STATS, *extra)]
    header += ["output_tok_s_ci_low", "output_tok_s_ci_high", "per_user_tok_s_ci_low", "per_user_tok_s_ci_high",
               "slo_attainment", "request_goodput", "output_goodput", "achieved_rate", "max_in_flight",
               "queue_delay_ms_p50", "queue_delay_ms_p99", "acceptance_rate", "acceptance_length"]  # fmt: skip
    rows = []
    for lv in levels:
        ol, gp, ci, spec = lv.open_loop, lv.goodput, lv.intervals, lv.spec_decode
        row = [level_name(lv), str(lv.sessions), _num(ol.request_rate if ol else None), _num(lv.repeats),
               _num(lv.requests), str(lv.completed), str(lv.failed), str(lv.output_tokens), _num(lv.duration_s),
               _num(lv.output_tok_s), _num(lv.request_throughput)]  # fmt: skip
        for block in (lv.ttft_ms, lv.tpot_ms, lv.e2el_s, lv.per_user_tok_s):
            row += _dist_cells(block, extra)
        out_ci = ci.output_tok_s if ci else None
        user_ci = ci.per_user_tok_s if ci else None
        row += [
            _num(out_ci.low if out_ci else None), _num(out_ci.high if out_ci else None),
            _num(user_ci.low if user_ci else None), _num(user_ci.high if user_ci else None),
            _num(gp.attainment if gp else None), _num(gp.request_goodput if gp else None),
            _num(gp.output_goodput if gp else None), _num(ol.achieved_rate if ol else None),
            _num(ol.max_in_flight if ol else None), _num(ol.queue_delay_ms.p50 if ol else None),
            _num(ol.queue_delay_ms.p99 if ol else None),
            _num(spec.acceptance_rate if spec else None), _num(spec.acceptance_length if spec else None),
        ]  # fmt: skip
        rows.append(row)
    return header, rows


def _render(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_csv(
    output: Path,
    levels: Sequence[LevelResult],
    level_records: Sequence[Sequence[RequestRecord]],
    origin: float,
    extra_percentiles: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Write both CSV files for the levels so far; returns their paths."""
    requests_path, levels_path = paths_for(output)
    rows: list[list[str]] = []
    for level, records in zip(levels, level_records):
        rows.extend(request_rows(level, records, origin))
    write_text_atomic(requests_path, _render(REQUEST_COLUMNS, rows))
    extra = [key for key in extra_percentiles if key not in STATS]
    header, level_rows = level_table(levels, extra)
    write_text_atomic(levels_path, _render(header, level_rows))
    return requests_path, levels_path
