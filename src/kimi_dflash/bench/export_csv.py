"""CSV beside the result JSON (``--csv``): ``<output>.requests.csv`` and ``<output>.levels.csv`` (their columns:
docs/benchmark.md, "Percentiles and CSV"), rewritten atomically after every level like the JSON."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kimi_dflash.bench.columns import STATS, csv_columns, level_name
from kimi_dflash.bench.goodput import meets
from kimi_dflash.bench.metrics import e2el, tpot, ttft
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.result import LevelResult
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.formatting import raw

REQUEST_COLUMNS = (
    "level", "request_rate", "repeat", "session", "turn", "scheduled_s", "dispatch_s", "admitted_s", "ready_s",
    "send_s", "first_token_s", "last_token_s", "done_s", "ttft_ms", "tpot_ms", "e2el_s", "output_tokens",
    "prompt_tokens", "token_chunks", "schedule_lag_ms", "cap_wait_ms", "queue_delay_ms", "meets_slo", "error",
    "finish_reason",
)  # fmt: skip


def paths_for(output: Path) -> tuple[Path, Path]:
    """``results/x.json`` -> ``results/x.requests.csv``, ``results/x.levels.csv``."""
    stem = output.with_suffix("") if output.suffix == ".json" else output
    return stem.with_name(stem.name + ".requests.csv"), stem.with_name(stem.name + ".levels.csv")


def _between_ms(later: float | None, earlier: float | None) -> str:
    return "" if later is None or earlier is None else raw((later - earlier) * 1000.0, 3)


def request_rows(level: LevelResult, records: Sequence[RequestRecord], origin: float) -> list[list[str]]:
    rate = level.open_loop.request_rate if level.open_loop else None
    slo = level.goodput.slo if level.goodput else None
    rows = []
    for r in records:

        def rel(t: float | None) -> str:
            return "" if not t else raw(t - origin)

        rows.append(
            [
                level_name(level), raw(rate), str(r.repeat), str(r.session), str(r.turn),
                rel(r.scheduled_time), rel(r.dispatch_time), rel(r.admitted_time), rel(r.ready_time),
                rel(r.send_time), rel(r.first_token_time), rel(r.last_token_time), rel(r.done_time),
                _between_ms(ttft(r), 0.0), _between_ms(tpot(r), 0.0), raw(e2el(r)), raw(r.output_tokens),
                raw(r.prompt_tokens), str(r.token_chunks), _between_ms(r.dispatch_time, r.scheduled_time),
                _between_ms(r.admitted_time, r.dispatch_time), _between_ms(r.send_time, r.scheduled_time),
                "" if slo is None else str(int(meets(r, slo))), r.error or "", r.finish_reason or "",
            ]
        )  # fmt: skip
    return rows


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
    write_text_atomic(requests_path, _render(REQUEST_COLUMNS, rows))
    table = csv_columns([key for key in extra_percentiles if key not in STATS])
    level_rows = [[raw(column.value(level)) for column in table] for level in levels]
    write_text_atomic(levels_path, _render([column.id for column in table], level_rows))
    return requests_path, levels_path
