"""``--csv``: per-request and per-level CSV beside the result JSON (docs/benchmark.md, "Percentiles and CSV")."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_dflash.bench.columns import STATS, csv_columns, level_name
from kimi_dflash.bench.goodput import meets
from kimi_dflash.bench.metrics import e2el, tpot, ttft
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.result import LevelResult
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.formatting import raw


@dataclass(frozen=True)
class _Level:
    """What a request's row reads from its level."""

    name: str
    rate: float | None
    slo: dict[str, float] | None
    origin: float  # the run's clock origin: timestamps are seconds from it


def _ms(later: float | None, earlier: float | None) -> str:
    return "" if later is None or earlier is None else raw((later - earlier) * 1000.0, 3)


def _since(level: _Level, t: float | None) -> str:
    return "" if not t else raw(t - level.origin)


TIMES = ("scheduled", "dispatch", "admitted", "ready", "send", "first_token", "last_token", "done")  # <name>_time
# The requests CSV: column -> its cell for a record of a level.
REQUEST_COLUMNS: dict[str, Callable[[RequestRecord, _Level], str]] = {
    "level": lambda r, level: level.name,
    "request_rate": lambda r, level: raw(level.rate),
    "repeat": lambda r, level: str(r.repeat),
    "session": lambda r, level: str(r.session),
    "turn": lambda r, level: str(r.turn),
    **{f"{name}_s": lambda r, level, name=name: _since(level, getattr(r, f"{name}_time")) for name in TIMES},
    "ttft_ms": lambda r, level: _ms(ttft(r), 0.0),
    "tpot_ms": lambda r, level: _ms(tpot(r), 0.0),
    "e2el_s": lambda r, level: raw(e2el(r)),
    "output_tokens": lambda r, level: raw(r.output_tokens),
    "prompt_tokens": lambda r, level: raw(r.prompt_tokens),
    "token_chunks": lambda r, level: str(r.token_chunks),
    "schedule_lag_ms": lambda r, level: _ms(r.dispatch_time, r.scheduled_time),
    "cap_wait_ms": lambda r, level: _ms(r.admitted_time, r.dispatch_time),
    "queue_delay_ms": lambda r, level: _ms(r.send_time, r.scheduled_time),
    "meets_slo": lambda r, level: "" if level.slo is None else str(int(meets(r, level.slo))),
    "error": lambda r, level: r.error or "",
    "finish_reason": lambda r, level: r.finish_reason or "",
}


def paths_for(output: Path) -> tuple[Path, Path]:
    """``results/x.json`` -> ``results/x.requests.csv``, ``results/x.levels.csv``."""
    stem = output.with_suffix("") if output.suffix == ".json" else output
    return stem.with_name(stem.name + ".requests.csv"), stem.with_name(stem.name + ".levels.csv")


def request_rows(level: LevelResult, records: Sequence[RequestRecord], origin: float) -> list[list[str]]:
    rate, slo = level.open_loop.request_rate if level.open_loop else None, level.goodput.slo if level.goodput else None
    at = _Level(level_name(level), rate, slo, origin)
    return [[cell(r, at) for cell in REQUEST_COLUMNS.values()] for r in records]


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
    requests_path, levels_path = paths_for(output)
    rows = [row for level, records in zip(levels, level_records) for row in request_rows(level, records, origin)]
    write_text_atomic(requests_path, _render(list(REQUEST_COLUMNS), rows))
    table = csv_columns([key for key in extra_percentiles if key not in STATS])
    level_rows = [[raw(column.value(level)) for column in table] for level in levels]
    write_text_atomic(levels_path, _render([column.id for column in table], level_rows))
    return requests_path, levels_path
