"""Command-line options for open-loop load, SLOs, percentiles, intervals and CSV (used by bench/cli.py).

Kept apart from cli.py so each feature's flags, their validation and their Settings entry live together.
"""

from __future__ import annotations

import argparse
import math

from kimi_dflash.bench.arrivals import ARRIVALS, THINK_DISTRIBUTIONS, ThinkTime, parse_rates
from kimi_dflash.bench.goodput import SLO_HELP, parse_slo
from kimi_dflash.bench.intervals import CONFIDENCE_LEVELS
from kimi_dflash.bench.level_extras import Analyses
from kimi_dflash.bench.openloop import OpenLoopConfig
from kimi_dflash.bench.result import OpenLoopSettings

DEFAULT_OPEN_SESSIONS = 100
# The longest open-loop run the benchmark will plan: its own waits (arrivals spread at the rate, think times),
# before any server time. A rate or think time beyond it is a typo (1e-9 for 1e9), not a measurement.
MAX_PLANNED_HOURS = 24


def _type(parse, name: str):  # type: ignore[no-untyped-def]
    def wrapped(text: str):  # type: ignore[no-untyped-def]
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    wrapped.__name__ = name
    return wrapped


def _positive(kind: type, name: str, strict: bool = True):  # type: ignore[no-untyped-def]
    def parse(text: str):  # type: ignore[no-untyped-def]
        try:
            value = kind(text)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {text!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {text!r}")
        if value <= 0 if strict else value < 0:
            raise ValueError(f"{name} must be {'>' if strict else '>='} 0, got {text!r}")
        return value

    return _type(parse, name)


def parse_percentiles(text: str) -> tuple[float, ...]:
    values = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(
                f"--percentiles: expected numbers between 0 and 100 separated by commas, got {text!r}"
            ) from None
        if not 0 <= value <= 100:
            raise ValueError(f"--percentiles: {value:g} is not between 0 and 100")
        values.append(value)
    if not values:
        raise ValueError(f"--percentiles: no percentile given in {text!r} (e.g. 50,90,95,99,99.9)")
    return tuple(dict.fromkeys(values))


def add_open_loop_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "open-loop load (instead of --sessions)",
        "Conversations start on an arrival process's clock, whatever the server does; each following turn is "
        "sent when the previous reply finished plus a think time. One level per rate.",
    )
    group.add_argument(
        "--request-rate",
        type=_type(parse_rates, "rates"),
        default=None,
        metavar="RATES",
        help="conversation starts per second (= requests/s with --turns-per-session 1); a comma list sweeps, "
        "e.g. 1,2,4; inf starts every conversation at once. Turns it into an open loop. The run's own waits "
        f"((conversations - 1) / rate + think time x (turns - 1), per rate and repeat) may add up to at most "
        f"{MAX_PLANNED_HOURS} h",
    )
    group.add_argument(
        "--arrival",
        choices=ARRIVALS,
        default="poisson",
        help="arrival process of conversation starts (default poisson)",
    )
    group.add_argument(
        "--burstiness",
        type=_positive(float, "--burstiness"),
        default=1.0,
        help="gamma shape B for --arrival gamma: 1 = poisson, < 1 burstier, > 1 smoother (default 1)",
    )
    group.add_argument(
        "--max-concurrency",
        type=_positive(int, "--max-concurrency"),
        default=None,
        help="cap on requests in flight; arrivals beyond it wait (the wait is reported as local queueing)",
    )
    group.add_argument(
        "--num-sessions",
        type=_positive(int, "--num-sessions"),
        default=None,
        help=f"conversations started per rate level and repeat (default {DEFAULT_OPEN_SESSIONS})",
    )
    group.add_argument(
        "--think-time",
        type=_positive(float, "--think-time", strict=False),
        default=0.0,
        metavar="SECONDS",
        help="mean pause between a reply and the conversation's next turn (default 0; counts toward the "
        f"{MAX_PLANNED_HOURS} h a run may plan, see --request-rate)",
    )
    group.add_argument(
        "--think-time-dist",
        choices=THINK_DISTRIBUTIONS,
        default="fixed",
        help="fixed (exactly --think-time), exp (exponential) or uniform (0 .. 2x); default fixed",
    )


def add_analysis_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("analysis")
    group.add_argument("--slo", type=_type(parse_slo, "slo"), default=None, metavar="SPEC", help=SLO_HELP)
    group.add_argument(
        "--percentiles",
        type=_type(parse_percentiles, "percentiles"),
        default=None,
        metavar="LIST",
        help="percentiles to report for TTFT, TPOT, E2EL, per-user tok/s and chunk gaps, e.g. 50,90,99,99.9 "
        "(stored under each distribution's 'percentiles'; the fixed p50/p90/p95/p99 stay)",
    )
    group.add_argument(
        "--confidence",
        type=float,
        choices=CONFIDENCE_LEVELS,
        default=0.95,
        help="confidence level of the intervals over repeats (--repeats >= 2; default 0.95)",
    )
    group.add_argument(
        "--csv",
        action="store_true",
        help="also write OUTPUT.requests.csv (one row per request) and OUTPUT.levels.csv (one row per level) "
        "beside the JSON",
    )


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Combinations that cannot work: exits with a message naming the fix (argparse's exit code 2)."""
    open_loop = args.request_rate is not None
    if open_loop and args.sessions is not None:
        parser.error("--sessions (closed loop) and --request-rate (open loop) exclude each other; give one")
    if not open_loop:
        for flag, given in (
            ("--max-concurrency", args.max_concurrency is not None),
            ("--num-sessions", args.num_sessions is not None),
            ("--think-time", args.think_time > 0),
            ("--arrival", args.arrival != "poisson"),
            ("--burstiness", args.burstiness != 1.0),
        ):
            if given:
                parser.error(f"{flag} belongs to the open loop: add --request-rate (e.g. --request-rate 2)")
    if args.burstiness != 1.0 and args.arrival != "gamma":
        parser.error("--burstiness shapes --arrival gamma only; add --arrival gamma")
    planned_s = planned_waits_s(args)
    if planned_s > MAX_PLANNED_HOURS * 3600:
        parser.error(
            f"this open loop would wait about {planned_s / 3600:.3g} h by its own schedule (per rate and repeat: "
            f"{args.num_sessions or DEFAULT_OPEN_SESSIONS} conversations arriving at the rate + --think-time x "
            f"{args.turns_per_session - 1} later turns), more than the {MAX_PLANNED_HOURS} h a run may plan. Raise "
            "--request-rate, or lower --num-sessions, --think-time, --turns-per-session or --repeats"
        )
    if args.slo and args.no_stream and set(args.slo) & {"ttft_ms", "tpot_ms", "user_tok_s"}:
        parser.error("--no-stream has no TTFT/TPOT: an --slo on ttft, tpot or user_tps needs streaming")


def planned_waits_s(args: argparse.Namespace) -> float:
    """Seconds an open-loop run spends in its own waits, whatever the server does: per rate and repeat, the
    conversations' arrivals spread at the rate ((sessions - 1) / rate: the first starts at once) plus one
    conversation's think times (mean x (turns - 1)). 0 for a closed loop."""
    if args.request_rate is None:
        return 0.0
    sessions = args.num_sessions or DEFAULT_OPEN_SESSIONS
    think_s = args.think_time * (args.turns_per_session - 1)
    return args.repeats * sum(
        (0.0 if math.isinf(rate) else (sessions - 1) / rate) + think_s for rate in args.request_rate
    )


def open_loop_config(args: argparse.Namespace) -> OpenLoopConfig | None:
    if args.request_rate is None:
        return None
    return OpenLoopConfig(
        rates=args.request_rate,
        sessions=args.num_sessions or DEFAULT_OPEN_SESSIONS,
        arrival=args.arrival,
        burstiness=args.burstiness,
        max_concurrency=args.max_concurrency,
        think=ThinkTime(args.think_time, args.think_time_dist),
    )


def open_loop_settings(ol: OpenLoopConfig | None) -> OpenLoopSettings | None:
    if ol is None:
        return None
    return OpenLoopSettings(
        request_rates=[None if math.isinf(r) else r for r in ol.rates],
        arrival=ol.arrival,  # type: ignore[arg-type]
        burstiness=ol.burstiness,
        max_concurrency=ol.max_concurrency,
        sessions_per_level=ol.sessions,
        think_time_s=ol.think.mean_s,
        think_time_dist=ol.think.distribution,  # type: ignore[arg-type]
    )


def analyses(args: argparse.Namespace) -> Analyses:
    return Analyses(percentiles=args.percentiles, slo=args.slo, confidence=args.confidence)
