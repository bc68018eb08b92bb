"""How late does the open-loop scheduler send? Send-time lag at high request rates against the synthetic server.

For each rate, runs the benchmark open-loop (1 turn per conversation, short replies) against the synthetic
server in its own process and reports, from the result: the timer lag (dispatch - scheduled), the local
queueing (send - scheduled) percentiles, the achieved rate, and the rate the server observed from its own
receipt times. Prints one JSON line per rate; ``--output`` writes them as a JSON list (atomically).

Usage: python benchmarks/open_loop_overhead.py [--rates 100,500,1000,2000] [--conversations 2000]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.bench.result import load_result
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.options import declare, option, run
from kimi_dflash_lab import use_test_helpers


def measure(url: str, rate: float, conversations: int, arrival: str, workdir: Path) -> dict[str, object]:
    out = workdir / f"rate-{rate:g}.json"
    argv = [
        sys.executable, "-m", "kimi_dflash.bench", "--base-url", url, "--request-rate", f"{rate:g}", "--arrival",
        arrival, "--num-sessions", str(conversations), "--turns-per-session", "1", "--max-tokens", "4",
        "--warmup", "0", "--progress-interval", "0", "--output", str(out),
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, text=True)
    with urllib.request.urlopen(f"{url}/stats/requests?", timeout=30) as response:
        received = sorted(e["received_at"] for e in json.loads(response.read()))
    with urllib.request.urlopen(f"{url}/stats?reset=1", timeout=30):
        pass
    level = load_result(out).results[0]
    ol = level.open_loop
    assert ol is not None
    span = received[-1] - received[0] if len(received) > 1 else 0.0
    return {
        "rate": rate,
        "arrival": arrival,
        "conversations": conversations,
        "completed": level.completed,
        "achieved_rate": ol.achieved_rate,
        "server_rate": (len(received) - 1) / span if span > 0 else None,
        "timer_lag_ms": {k: getattr(ol.schedule_lag_ms, k) for k in ("p50", "p99", "max")},
        "queue_delay_ms": {k: getattr(ol.queue_delay_ms, k) for k in ("p50", "p99", "max")},
        "client_cpu_util": level.client.cpu_util if level.client else None,
    }


@dataclass(kw_only=True)
class OverheadOptions:
    rates: str = option("request rates to try (req/s)", default="100,500,1000,2000")
    conversations: int = option("requests per rate (default %(default)s)", default=2000)
    arrival: str = option(choices=["constant", "poisson"], default="constant")
    output: Path | None = option("write the rows as JSON")


add_cli_args = declare(OverheadOptions, __doc__.split("\n\n")[0])


def main(args: OverheadOptions) -> int:
    rows = []
    use_test_helpers()
    from synthetic_server import running

    with tempfile.TemporaryDirectory() as tmp, running(["--ttft-ms", "5", "--chunk-interval-ms", "5"]) as url:
        for rate in (float(r) for r in args.rates.split(",")):
            row = measure(url, rate, args.conversations, args.arrival, Path(tmp))
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.output is not None:
        write_text_atomic(args.output, json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="open_loop_overhead.py"))
