"""Measure the speculative-token advisor's accuracy on points it did not see (the CPU demo by default).

Starts one server per k (all up at once, on free ports), then benchmarks them in rounds, rotating the order each
round, so that a drift in machine load falls on every k alike (on a shared machine this matters more than the
number of requests). The advisor is then fitted on --fit-k only and compared with the measured held-out k:

  python benchmarks/advisor_check.py --out results/advisor-check            # k=1,2,4; fit on 1,4; check 2
  python benchmarks/advisor_check.py --ks 1,2,3,4 --fit-k 1,4 --rounds 4 --sessions 2,4,8

Exit 0 when every held-out point is within --tolerance (default 10 %) of its measured aggregate tok/s, 1 if not.
Benchmark options after `--` go to payload/benchmark_multi_turn.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.advisor.cli import render
from kimi_dflash.advisor.model import measurements, predict
from kimi_dflash.bench.result import load_result
from kimi_dflash.core.options import declare, option, run
from kimi_dflash.launch.serve_sh import free_port
from kimi_dflash.sweep.grid import Point

REPO = Path(__file__).resolve().parents[3]  # the checkout (a lab study runs from one)

DEFAULT_BENCH = ["--max-tokens", "128", "--turns-per-session", "2", "--ignore-eos"]


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _serve(config: Path, k: int, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in {"API_KEY", "HOST"}}
    env.update(Point((("NUM_SPECULATIVE_TOKENS", str(k)),)).server_env(), PORT=str(port))
    env.setdefault("KIMI_PYTHON", sys.executable)
    return subprocess.run([str(REPO / "serve.sh"), str(config), *args], env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip


@dataclass(kw_only=True)
class AdvisorCheckOptions:
    config: Path = option(default=REPO / "configs" / "demo-cpu.env")
    ks: list[int] = option("speculative token counts measured (1,2,4)", default=[1, 2, 4], parse=_ints)
    fit_k: list[int] = option("the k the advisor is fitted on (1,4)", default=[1, 4], parse=_ints)
    sessions: str = option("concurrency levels (2,4)", default="2,4")
    rounds: int = option("benchmark rounds per server (3)", default=3)
    tolerance: float = option("allowed held-out error (0.10)", default=0.10)
    out: Path = option(default=Path("results") / "advisor-check")
    bench: list[str] = option(rest=True)  # every other option goes to each benchmark run
    command_line: list[str] = option(argv=True)


add_cli_args = declare(AdvisorCheckOptions, __doc__)


def main(args: AdvisorCheckOptions) -> int:
    bench = [a for a in args.bench if a != "--"] or DEFAULT_BENCH
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM too stops the servers (finally below)
    ports = {k: free_port() for k in args.ks}
    try:
        for k, port in ports.items():
            print(f"starting k={k} on port {port}", file=sys.stderr, flush=True)
            started = _serve(args.config, k, port, "--wait", "--log", str(args.out / f"server-k{k}.log"))
            if started.returncode != 0:
                print(f"error: the k={k} server did not start:\n{started.stderr[-2000:]}", file=sys.stderr)
                return 2
        for round_index in range(args.rounds):
            order = args.ks[round_index % len(args.ks) :] + args.ks[: round_index % len(args.ks)]
            for k in order:
                output = args.out / f"k{k}-round{round_index}.json"
                print(f"round {round_index + 1}/{args.rounds}: k={k}", file=sys.stderr, flush=True)
                subprocess.run([sys.executable, "-m", "kimi_dflash.bench", "--base-url", f"http://127.0.0.1:{ports[k]}",
                                "--sessions", args.sessions, "--label", f"k{k}-round{round_index}", "--output",
                                str(output), "--progress-interval", "0", *bench],
                               check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    finally:
        for k, port in ports.items():
            _serve(args.config, k, port, "--stop")
    runs = measurements([(str(p), load_result(p)) for p in sorted(args.out.glob("k*-round*.json"))])
    p, predictions = predict(runs, set(args.fit_k))
    print("\n".join(render(p, predictions, set(args.fit_k))))
    held = [pr for pr in predictions if pr.measured is not None and not pr.fitted and pr.k > 0]
    worst = max((abs(pr.error or 0.0) for pr in held), default=0.0)
    verdict = "within" if worst <= args.tolerance else "OUTSIDE"
    print(f"\nadvisor check: {len(held)} held-out points, largest error {worst * 100:.1f} % ({verdict} "
          f"{args.tolerance * 100:.0f} %); command: {' '.join(args.command_line)}")  # fmt: skip
    return 0 if held and worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(run(__name__, prog="advisor_check.py"))
