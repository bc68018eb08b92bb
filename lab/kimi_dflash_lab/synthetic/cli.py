"""Command line of the synthetic server: ``python -m kimi_dflash_lab.synthetic --help``."""

from __future__ import annotations

import argparse
import asyncio
import os

from kimi_dflash_lab.synthetic.faults import FAULTS
from kimi_dflash_lab.synthetic.schedule import Schedule
from kimi_dflash_lab.synthetic.server import serve

DESCRIPTION = """\
A fast, exactly-timed fake OpenAI streaming server (stdlib asyncio only): checks the benchmark against
a known truth and measures how many streams a client can follow. Prints "listening on URL" when ready;
GET /stats and /stats/requests report how late its writes were and what it really did per request."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kimi_dflash_lab.synthetic",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
        epilog="faults:\n" + "\n".join(f"  {name:<12} {doc}" for name, doc in FAULTS.items()),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default)")
    parser.add_argument("--ttft-ms", type=float, default=100.0, help="request body received -> first content chunk")
    parser.add_argument("--chunk-interval-ms", type=float, default=20.0, help="gap between content chunks")
    parser.add_argument("--chunk-tokens", default="1", help="tokens per chunk, a comma list cycles (e.g. 3,1,2)")
    parser.add_argument("--output-tokens", type=int, default=None, help="cap on tokens per reply (default: max_tokens)")
    parser.add_argument("--reasoning-tokens", type=int, default=0, help="first R tokens stream as reasoning deltas")
    parser.add_argument("--reasoning-field", default="reasoning", choices=["reasoning", "reasoning_content"])
    parser.add_argument("--spec-tokens", type=int, default=0, help="K > 0: export spec-decode counters on /metrics")
    parser.add_argument(
        "--per-request-spec-metrics",
        default="none",
        choices=["none", "summary", "detailed"],
        help="with --spec-tokens: put vLLM's metrics.speculative_decoding on each reply (final usage chunk of a "
        "stream, or the body), counted exactly as the /metrics counters",
    )
    parser.add_argument("--faults", default="ok", help="comma list of per-request behaviours, cycled (see below)")
    parser.add_argument("--model", default="synthetic", help="model id served on /v1/models")
    parser.add_argument("--max-model-len", type=int, default=65536, help="max_model_len on /v1/models")
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU core")
    parser.add_argument("--api-key", default=None, help="require this bearer token on every request")
    parser.add_argument("--early-role", action="store_true", help="send the role-only chunk at once, before TTFT")
    parser.add_argument(
        "--aligned",
        action="store_true",
        help="drive all streams from one shared ticker (for capacity runs: far cheaper per chunk; the first "
        "chunk then waits for the next tick, so TTFT varies by up to one interval while chunk gaps stay exact)",
    )
    parser.add_argument(
        "--uvloop",
        action="store_true",
        help="use uvloop if installed (faster, but its clock has 1 ms resolution: keep it off for exact TTFT)",
    )
    args = parser.parse_args(argv)
    try:
        args.chunk_tokens = tuple(int(x) for x in args.chunk_tokens.split(","))
        if not args.chunk_tokens or min(args.chunk_tokens) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--chunk-tokens must be positive integers separated by commas, got {args.chunk_tokens!r}")
    args.faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = [f for f in args.faults if f not in FAULTS]
    if unknown or not args.faults:
        parser.error(f"unknown fault(s) {unknown}; choose from {', '.join(FAULTS)}")
    if args.aligned and args.faults != ("ok",):
        parser.error("--aligned is for capacity runs; use the default per-stream timers with --faults")
    if args.spec_tokens > 0 and max(args.chunk_tokens) > args.spec_tokens + 1:
        parser.error("--chunk-tokens may not exceed --spec-tokens + 1 (a verify step yields at most K + 1 tokens)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    schedule = Schedule(
        ttft_s=args.ttft_ms / 1000,
        chunk_interval_s=args.chunk_interval_ms / 1000,
        chunk_tokens=args.chunk_tokens,
        output_tokens=args.output_tokens,
        reasoning_tokens=args.reasoning_tokens,
        reasoning_field=args.reasoning_field,
        spec_tokens=args.spec_tokens,
        per_request_spec=args.per_request_spec_metrics,
        faults=args.faults,
        model=args.model,
        max_model_len=args.max_model_len,
        aligned=args.aligned,
        early_role=args.early_role,
        api_key=args.api_key,
    )
    runner = asyncio.run
    if args.uvloop:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    try:
        runner(serve(schedule, args.host, args.port))
    except KeyboardInterrupt:
        pass
