"""Progress of a long level on stderr, from a separate task that reads the record list every ``interval_s``:
nothing is added to the request path."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from kimi_dflash.bench.records import CANCELLED, RequestRecord
from kimi_dflash.core.formatting import number, seconds

DEFAULT_INTERVAL_S = 10.0


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


async def report_progress(
    label: str,
    records: list[RequestRecord],
    first: int,
    total: int,
    started: float,
    interval_s: float,
    out: TextIO = sys.stderr,
) -> None:
    """Print ``progress_line`` every ``interval_s`` until cancelled; ``records[first:]`` is this repeat's."""
    if interval_s <= 0:
        return
    while True:
        await asyncio.sleep(interval_s)
        print(progress_line(label, records[first:], total, time.perf_counter() - started), file=out, flush=True)
