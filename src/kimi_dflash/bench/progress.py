"""Progress of a long level on stderr (runner.Repeat prints it from a separate task that reads the record list every
--progress-interval: nothing is added to the request path)."""

from __future__ import annotations

from collections.abc import Sequence

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
