"""Command line of the synthetic server: ``python -m synthetic_server --help``."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import ClassVar, Literal

from kimi_dflash.core.options import declare, option
from synthetic_server.faults import FAULTS
from synthetic_server.schedule import Schedule
from synthetic_server.server import serve

DESCRIPTION = """\
A fast, exactly-timed fake OpenAI streaming server (stdlib asyncio only): checks the benchmark against
a known truth and measures how many streams a client can follow. Prints "listening on URL" when ready;
GET /stats and /stats/requests report how late its writes were and what it really did per request."""


def _chunk_tokens(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise ValueError(f"--chunk-tokens must be positive integers separated by commas, got {text!r}")
    return values


def _faults(text: str) -> tuple[str, ...]:
    faults = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in faults if f not in FAULTS]
    if unknown or not faults:
        raise ValueError(f"unknown fault(s) {unknown}; choose from {', '.join(FAULTS)}")
    return faults


@dataclass(kw_only=True)
class SyntheticOptions:
    ABBREVIATIONS: ClassVar[bool] = False

    host: str = option("address to bind (default 127.0.0.1)", default="127.0.0.1")
    port: int = option("port; 0 picks a free one (default)", default=0)
    ttft_ms: float = option("request body received -> first content chunk", default=100.0)
    chunk_interval_ms: float = option("gap between content chunks", default=20.0)
    chunk_tokens: tuple[int, ...] = option("tokens per chunk, a comma list cycles (e.g. 3,1,2)", default=(1,),
        parse=_chunk_tokens)  # fmt: skip
    output_tokens: int | None = option("cap on tokens per reply (default: max_tokens)")
    reasoning_tokens: int = option("first R tokens stream as reasoning deltas", default=0)
    reasoning_field: Literal["reasoning", "reasoning_content"] = option(default="reasoning")
    spec_tokens: int = option("K > 0: export spec-decode counters on /metrics", default=0)
    per_request_spec_metrics: Literal["none", "summary", "detailed"] = option("with --spec-tokens: put vLLM's "
        "metrics.speculative_decoding on each reply (final usage chunk of a stream, or the body), counted exactly "
        "as the /metrics counters", default="none")  # fmt: skip
    faults: tuple[str, ...] = option("comma list of per-request behaviours, cycled (see below)", default=("ok",),
        parse=_faults)  # fmt: skip
    model: str = option("model id served on /v1/models", default="synthetic")
    max_model_len: int = option("max_model_len on /v1/models", default=65536)
    cpu: int | None = option("pin this process to one CPU core")
    api_key: str | None = option("require this bearer token on every request")
    early_role: bool = option("send the role-only chunk at once, before TTFT")
    aligned: bool = option("drive all streams from one shared ticker (for capacity runs: far cheaper per chunk; the "
        "first chunk then waits for the next tick, so TTFT varies by up to one interval while chunk gaps stay exact)"
    )  # fmt: skip
    uvloop: bool = option("use uvloop if installed (faster, but its clock has 1 ms resolution: keep it off for exact "
        "TTFT)")  # fmt: skip

    def check(self) -> None:
        if self.aligned and self.faults != ("ok",):
            raise ValueError("--aligned is for capacity runs; use the default per-stream timers with --faults")
        if self.spec_tokens > 0 and max(self.chunk_tokens) > self.spec_tokens + 1:
            raise ValueError(
                "--chunk-tokens may not exceed --spec-tokens + 1 (a verify step yields at most K + 1 tokens)"
            )


add_cli_args = declare(
    SyntheticOptions, DESCRIPTION, "faults:\n" + "\n".join(f"  {name:<12} {doc}" for name, doc in FAULTS.items())
)


def main(args: SyntheticOptions) -> None:
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
