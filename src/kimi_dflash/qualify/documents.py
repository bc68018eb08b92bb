"""The files qualify's analysis steps write in OUT and its report reads back, typed (documents.Document)."""

from __future__ import annotations

from collections.abc import Callable

from kimi_dflash.bench.intervals import RatioInterval
from kimi_dflash.core.formatting import interval, number
from kimi_dflash.documents import Document, Model
from kimi_dflash.validate.engine import AgreementSummary


class AcceptanceRow(Model):
    point: str
    k: int
    sessions: int
    per_position: list[float]
    acceptance_rate: float
    acceptance_length: float
    drafts: int | None = None


class Acceptance(Document):
    """acceptance.json: acceptance by draft position per speculative point and concurrency (/metrics deltas)."""

    SCHEMA = "kimi-dflash/qualify-acceptance"
    WHAT = "acceptance file"
    rows: list[AcceptanceRow]


class Group(Model):
    key: str
    requests: int
    steps: int
    accepted: int
    drafted: int
    tau: float | None
    alpha: float | None
    tau_min: float | None
    tau_p50: float | None
    tau_p90: float | None
    tau_max: float | None
    alpha_p50: float | None


class PerRequestRow(Model):
    k: int
    sessions: int
    num_speculative_tokens: int | None
    requests_without: int
    total: Group
    per_position: list[float]
    per_turn: list[Group]
    per_prompt_length: list[Group]
    per_category: list[Group]
    counter_accepted: int | None
    counter_drafted: int | None


class PerRequest(Document):
    SCHEMA = "kimi-dflash/qualify-per-request"
    WHAT = "per-request acceptance file"
    rows: list[PerRequestRow]


class GoodputRow(Model):
    k: int
    sessions: int
    requests: int
    met: int
    attainment: float | None
    output_goodput: float | None
    request_goodput: float | None
    output_tok_s: float | None
    violations: dict[str, int]


class AtSloRow(Model):
    k: int
    sustained_sessions: int | None
    attainment: float | None
    output_goodput: float | None
    reference_sessions: int | None
    speedup: float | None


class MatchedRow(Model):
    k: int
    sessions: int
    speedup: float | None
    low: float | None
    high: float | None
    significant: bool | None
    confidence: float
    repeats: list[int]


class Goodput(Document):
    """goodput.json: goodput at the SLO, the speedup at the SLO and at matched concurrency."""

    SCHEMA = "kimi-dflash/qualify-goodput"
    WHAT = "goodput file"
    slo: dict[str, float]
    slo_text: str
    slo_source: str
    threshold: float
    rows: list[GoodputRow]
    at_slo: list[AtSloRow]
    matched: list[MatchedRow]


class ReplyIdentityRow(Model):
    k: int
    sessions: int
    compared: int
    identical: int
    first_difference: str | None


class ProjectionRow(Model):
    sessions: int
    output_tok_s: float | None
    per_user_tok_s_p50: float | None
    tau_expected: float | None
    tau_measured: float | None
    per_position_measured: list[float | None]
    reference_tok_s: float | None
    speedup: float | None
    candidate_tok_s: float | None
    candidate_speedup: float | None


class Projection(Document):
    """projection.json: the synthetic-acceptance projection beside the measured grid (speed only)."""

    SCHEMA = "kimi-dflash/qualify-projection"
    WHAT = "projection file"
    what: str
    rates: list[float]
    k: int
    rows: list[ProjectionRow]
    result: str


class GraphRow(Model):
    sessions: int
    output_tok_s: float | None
    per_user_tok_s_p50: float | None
    tau: float | None
    eager_tok_s: float | None
    eager_tau: float | None
    speedup_vs_eager: float | None
    reference_tok_s: float | None
    speedup_vs_reference: float | None


class Graphs(Document):
    """graphs.json: the graph-mode candidate, the cudagraph mode its server ended with, beside the eager one."""

    SCHEMA = "kimi-dflash/qualify-graphs"
    WHAT = "graph-mode candidate file"
    overrides: list[tuple[str, str]]
    cudagraph_mode: str | None
    downgraded: bool
    mode_evidence: str
    identity: AgreementSummary | None
    rows: list[GraphRow]
    result: str


class Recommendation(Model):
    k: int
    output_tok_s: float
    per_user_tok_s: float
    measured: bool


class Advisor(Document):
    """advisor.json: the recommended k per concurrency (per_position empty: the model was not fitted)."""

    SCHEMA = "kimi-dflash/qualify-advisor"
    WHAT = "advisor file"
    per_position: list[float]
    recommendations: dict[str, Recommendation]
    lines: list[str]


class RankRow(Model):
    rank: int | None  # None: not ranked (the note says why)
    candidate: str
    config: str
    method: str
    k: int
    lossless: str  # the candidate's verdict: PASS, FAIL, NOT RUN
    output_tok_s: float | None
    output_goodput: float | None
    attainment: float | None
    speedup: MatchedRow | None  # over the reference at the matched concurrency, with its interval
    tau: float | None
    per_position: list[float]
    advisor_k: int | None  # the advisor's k for this drafter at the matched concurrency
    note: str = ""


class Shootout(Document):
    """shootout.json: the candidates of a shoot-out ranked at the concurrency every one was measured at."""

    SCHEMA = "kimi-dflash/qualify-shootout"
    WHAT = "shoot-out ranking"
    sessions: int | None  # the matched concurrency (None: no common one)
    ranked_by: str
    rows: list[RankRow]


def number2(value: float | None) -> str:
    return number(value, 2)


def shown(e: Estimate | None, how: Callable[[float | None], str] = number2, scale: float = 1.0, digits: int = 2) -> str:
    """``1.02x [0.97, 1.07]``: the mean as ``how`` writes it, then the interval (times ``scale``); ``how(None)``."""
    if e is None:
        return how(None)
    low, high = (None if v is None else v * scale for v in (e.low, e.high))
    return f"{how(e.mean)} {interval(low, high, digits)}"


class Estimate(Model):
    """A mean over repeats with its confidence interval (bench/intervals.py; low/high None: fewer than 2)."""

    mean: float
    low: float | None
    high: float | None

    @classmethod
    def of(cls, found: RatioInterval | None) -> Estimate | None:
        return None if found is None else cls(mean=found.ratio, low=found.low, high=found.high)


class AmplitudeSide(Model):
    choice: str  # DRAFTER_ROPE_AMPLITUDE: legacy or engine
    amplitude: float
    lossless: str  # the token-identity verdict of this side's server: PASS, FAIL, NOT RUN
    verdict_file: str
    result: str | None  # its benchmark (amplitude/<point>.json)
    per_position: list[Estimate]  # acceptance by draft position, over repeats
    tau_repeats: list[float]  # tokens per verify step, one per repeat
    tau: Estimate | None


class Amplitude(Document):
    """amplitude.json: the drafter served at both RoPE amplitudes on the same prompts, k and T=0."""

    SCHEMA = "kimi-dflash/qualify-amplitude"
    WHAT = "amplitude file"
    sessions: int
    sides: list[AmplitudeSide]
    recommended: str | None  # the choice; None: neither was lossless with acceptance measured
    value: str | None  # what the tuned config sets DRAFTER_ROPE_AMPLITUDE to
    ratio: Estimate | None  # tau of the recommended over the other's
    why: str


class ScheduleChoice(Model):
    sessions: int
    k: int
    output_tok_s: float
    over: int | None  # the shallower k it beat beyond the interval
    ratio: Estimate | None


class ScheduleRow(Model):
    sessions: int
    k: int  # the depth the schedule gives a batch of this size
    schedule_tok_s: Estimate | None
    fixed_tok_s: dict[int, float]  # every fixed k measured at this concurrency (mean over repeats)
    best_k: int | None
    vs_best: Estimate | None  # the schedule's aggregate tok/s over the best fixed k's, with its interval


class Schedule(Document):
    """schedule.json: depth by load from this run's grid, served against every fixed k (docs/qualify.md)."""

    SCHEMA = "kimi-dflash/qualify-schedule"
    WHAT = "schedule file"
    depths: dict[int, str]  # the token-identity verdict of every k in the grid
    why: str
    schedule: str | None = None  # NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE; None: no schedule (why)
    spec_tokens: int | None = None  # the NUM_SPECULATIVE_TOKENS it needs (a fixed k: that k)
    choices: list[ScheduleChoice] = []
    notes: list[str] = []  # depths dropped or moved to another backend, and why
    backend: str | None = None  # "TRITON_MLA" when the depths need it (ROCM_USE_AITER_MLA=false)
    lossless: str = "NOT RUN"  # the schedule server's own verdict
    rows: list[ScheduleRow] = []
    result: str | None = None
