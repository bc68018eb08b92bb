"""Every figure the level tables show, declared once; a table is a selection of them (docs/development.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kimi_dflash.bench.result import LevelResult
from kimi_dflash.core.formatting import Fmt, general, text_row

STATS = ("mean", "p50", "p90", "p95", "p99")  # a distribution's fields (the levels CSV shows each)


def path(level: Any, dotted: str) -> Any:
    """The value at ``dotted`` ("spec_decode.acceptance_rate") in the result model; None where a step is missing."""
    for name in dotted.split("."):
        level = getattr(level, name, None)
    return level


@dataclass(frozen=True)
class Column:
    id: str  # its name in the levels CSV
    header: str  # its heading in every table
    get: str | Callable[[Any], Any]  # a path into the level result ("ttft_ms.p95"), or a function of the level
    fmt: Fmt = Fmt(1)  # how tables show it (the CSV keeps full precision)
    short: str = ""  # an ASCII heading for the fixed-width stdout table, where the header is not ASCII

    def value(self, level: Any) -> Any:
        return self.get(level) if callable(self.get) else path(level, self.get)

    def cell(self, level: Any) -> str:
        return self.fmt(self.value(level))

    def over(self, level: Any, reference: Any) -> float | None:
        """Its value at ``level`` over its value at ``reference`` (a speedup); None when either is missing or 0."""
        new, old = self.value(level), self.value(reference)
        return None if new is None or not old else new / old


@dataclass(frozen=True)
class Stats:
    """A distribution of the level: a column per statistic or --percentiles entry, ``TTFT["p95"]``."""

    id: str
    name: str
    unit: str
    fmt: Fmt
    at: str = ""  # its path in the level result (default: the id)

    def __getitem__(self, stat: str) -> Column:
        heading = " ".join(part for part in (self.name, "" if stat == "mean" else stat, self.unit) if part)
        where = self.at or self.id

        def asked(level: Any) -> float | None:
            block = path(level, where)
            return (block.percentiles or {}).get(stat) if block is not None else None

        return Column(f"{self.id}_{stat}", heading, f"{where}.{stat}" if stat in STATS else asked, self.fmt)

    def columns(self, extra: Sequence[str] = ()) -> list[Column]:
        return [self[stat] for stat in (*STATS, *extra)]


def level_name(level: LevelResult) -> str:
    """The level's load: its session count (closed loop) or its rate (open loop, "inf": all at once)."""
    if level.open_loop is None:
        return str(level.sessions)
    rate = level.open_loop.request_rate
    return "inf" if rate is None else general(rate) + "/s"


INT, PERCENT = Fmt(0), Fmt(1, "percent")
LEVEL = Column("level", "sessions", level_name)
COMPLETED = Column("completed", "ok", "completed", INT)
FAILED = Column("failed", "failed", "failed", INT)
OUTPUT_TOK_S = Column("output_tok_s", "output tok/s", "output_tok_s")
REQUEST_THROUGHPUT = Column("request_throughput", "req/s", "request_throughput", Fmt(2))
TTFT = Stats("ttft_ms", "TTFT", "ms", INT)
TPOT = Stats("tpot_ms", "TPOT", "ms", Fmt(1))
E2EL = Stats("e2el_s", "E2EL", "s", Fmt(2))
PER_USER = Stats("per_user_tok_s", "per-user", "tok/s", Fmt(1))  # 1 / TPOT
SLO_ATTAINMENT = Column("slo_attainment", "attainment", "goodput.attainment", PERCENT)
REQUEST_GOODPUT = Column("request_goodput", "goodput req/s", "goodput.request_goodput", Fmt(2))
OUTPUT_GOODPUT = Column("output_goodput", "goodput tok/s", "goodput.output_goodput")
ACCEPTANCE_RATE = Column("acceptance_rate", "acceptance", "spec_decode.acceptance_rate", PERCENT)
ACCEPTANCE_LENGTH = Column("acceptance_length", "τ", "spec_decode.acceptance_length", Fmt(2), short="tau")
QUEUE_DELAY = Stats("queue_delay_ms", "queue delay", "ms", Fmt(1), at="open_loop.queue_delay_ms")
# the intervals over repeats: output_tok_s_ci_low ... per_user_tok_s_ci_high
INTERVALS = [
    Column(f"{name}_ci_{end}", f"{header} CI {end}", f"intervals.{name}.{end}")
    for name, header in (("output_tok_s", "output tok/s"), ("per_user_tok_s", "per-user tok/s"))
    for end in ("low", "high")
]

# -- the tables: which columns each shows, in order (a column only one table shows is declared in it) ---------------

Pair = tuple[str, Column, Column]  # two columns in one stdout cell, "a/b", under one heading
STDOUT: tuple[Column | Pair, ...] = (
    Column("level", "sessions", lambda level: level_name(level) + "*" * level.partial),  # * a partial level
    ("ok/fail", COMPLETED, FAILED),
    OUTPUT_TOK_S,
    REQUEST_THROUGHPUT,
    ("TTFT p50/p95 ms", TTFT["p50"], TTFT["p95"]),
    ("TPOT p50/p95 ms", TPOT["p50"], TPOT["p95"]),
    PER_USER["mean"],
    Stats("per_user_tok_s_e2el", "N/E2EL", "", Fmt(1))["mean"],  # the wait for the first token included
    E2EL["p95"],
    Stats("tokens_per_chunk", "tok/chunk", "", Fmt(2))["mean"],
    ACCEPTANCE_RATE,
    ACCEPTANCE_LENGTH,
)
TURN = Column("turn", "turn", "turn", INT)  # the per-turn rows (TurnResult) read the same paths as a level
PROMPT_TOKENS = Column("prompt_tokens_mean", "prompt tok", "prompt_tokens.mean", INT)
TURNS = (TURN, COMPLETED, PROMPT_TOKENS, TTFT["p50"], TPOT["p50"], E2EL["p50"])  # stdout, under each level
CSV: tuple[Column | Stats, ...] = (  # a distribution brings its statistics and the percentiles asked
    LEVEL,
    Column("sessions", "sessions", "sessions", INT),
    Column("request_rate", "request rate", "open_loop.request_rate", Fmt(2)),
    Column("repeats", "repeats", "repeats", INT),
    Column("requests", "requests", "requests", INT),
    COMPLETED,
    FAILED,
    Column("output_tokens", "output tokens", "output_tokens", INT),
    Column("duration_s", "duration s", "duration_s"),
    OUTPUT_TOK_S,
    REQUEST_THROUGHPUT,
    TTFT,
    TPOT,
    E2EL,
    PER_USER,
    *INTERVALS,
    SLO_ATTAINMENT,
    REQUEST_GOODPUT,
    OUTPUT_GOODPUT,
    Column("achieved_rate", "achieved rate", "open_loop.achieved_rate", Fmt(2)),
    Column("max_in_flight", "max in flight", "open_loop.max_in_flight", INT),
    QUEUE_DELAY["p50"],
    QUEUE_DELAY["p99"],
    ACCEPTANCE_RATE,
    ACCEPTANCE_LENGTH,
)
# After the sweep's sessions and point columns; the first column's ratio over the no-speculation point follows it.
SWEEP = (OUTPUT_TOK_S, PER_USER["mean"], TPOT["p50"], TTFT["p95"], ACCEPTANCE_RATE, ACCEPTANCE_LENGTH)
# The comparison: both runs side by side (the first column with its speedup), then "baseline → candidate".
COMPARE_SIDE_BY_SIDE = (OUTPUT_TOK_S, PER_USER["mean"])
COMPARE_ARROWS = (TTFT["p95"], TPOT["p95"], E2EL["p95"], FAILED)
SLO = (SLO_ATTAINMENT, OUTPUT_TOK_S, OUTPUT_GOODPUT, REQUEST_GOODPUT)  # a level's goodput at the SLO
SPEC = (ACCEPTANCE_RATE, ACCEPTANCE_LENGTH)  # a level's speculative decoding
SPEC_GROUPS = (  # stdout, the per-request acceptance under a level: one row per group of requests (SpecGroup)
    Column("group", "group", "key"),
    Column("requests", "requests", "requests", INT),
    Column("steps", "steps", "spec_steps", INT),
    Column("tau", "tau", "acceptance_length", Fmt(2)),
    Column("tau_p50", "tau p50", "acceptance_length_dist.p50", Fmt(2)),
    Column("tau_p90", "tau p90", "acceptance_length_dist.p90", Fmt(2)),
    Column("accept", "accept", "acceptance_rate", PERCENT),
    Column("accept_p50", "accept p50", "acceptance_rate_dist.p50", PERCENT),
)


def stdout_table(entries: Sequence[Column | Pair], levels: Sequence[Any], prefix: str = "") -> list[str]:
    labels = [entry.short or entry.header if isinstance(entry, Column) else entry[0] for entry in entries]
    rows = [
        [e.cell(level) if isinstance(e, Column) else "/".join(c.cell(level) for c in e[1:]) for e in entries]
        for level in levels
    ]
    widths = [max(len(cell) for cell in column) for column in zip([label.ljust(4) for label in labels], *rows)]
    return [text_row(labels, widths, prefix), *(text_row(cells, widths, " " * len(prefix)) for cells in rows)]


def csv_columns(extra: Sequence[str] = ()) -> list[Column]:
    """The levels CSV's columns: each distribution with its statistics, then the extra percentiles asked."""
    return [c for entry in CSV for c in (entry.columns(extra) if isinstance(entry, Stats) else [entry])]
