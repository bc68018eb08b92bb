"""The result file as one typed model: metrics fill it, the CLI writes it, every reader loads it.

Schema ``kimi-dflash/benchmark-result``, version ``SCHEMA_VERSION``. Adding a field keeps the version (give
it a default: files written before it existed lack it); renaming or removing one, or changing its meaning,
bumps the version, and ``load_result`` refuses versions it does not know. Metric definitions are in
``metrics.py`` and docs/benchmark.md; the field reference and JSON Schema in docs are generated from this
module (``python -m kimi_dflash.bench.result_schema --write``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from kimi_dflash.bench.fields import meta
from kimi_dflash.bench.intervals import Interval
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.settings import ArrivalName, Settings
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.user_files import MiB, read_user_json

SCHEMA = "kimi-dflash/benchmark-result"
SCHEMA_VERSION = 1
# --record-requests keeps every chunk's timestamp: a long run's file reaches hundreds of MB.
RESULT_MAX_BYTES = 1024 * MiB

RunStatus = Literal["running", "complete", "interrupted", "aborted", "failed", "crashed"]
SpecDecodeStatus = Literal["ok", "absent", "no_drafts", "counter_reset", "unavailable"]


@dataclass(kw_only=True)
class Distribution:
    """Summary of a per-request quantity over a level's successful requests (numpy's linear-interpolation
    percentiles, as ``vllm bench serve`` uses). With no values every statistic is null and count is 0."""

    mean: float | None = field(metadata=meta("arithmetic mean"))
    p50: float | None = field(metadata=meta("median"))
    p90: float | None = field(default=None, metadata=meta("90th percentile"))
    p95: float | None = field(metadata=meta("95th percentile"))
    p99: float | None = field(metadata=meta("99th percentile"))
    min: float | None = field(default=None, metadata=meta("smallest value"))
    max: float | None = field(default=None, metadata=meta("largest value"))
    std: float | None = field(default=None, metadata=meta("population standard deviation"))
    count: int | None = field(default=None, metadata=meta("number of values"))
    percentiles: dict[str, float | None] | None = field(
        default=None,
        metadata=meta("the percentiles asked with --percentiles, keyed p<q> (e.g. p99.9)", omit_if_none=True),
    )


@dataclass(kw_only=True)
class SpecDecode:
    """Speculative decoding over the measured window, from vLLM's /metrics counter deltas (Δ)."""

    acceptance_rate: float = field(metadata=meta("Δaccepted tokens / Δdraft tokens (a fraction, not a percentage)"))
    acceptance_length: float = field(metadata=meta("mean acceptance length τ = 1 + Δaccepted / Δdrafts"))
    per_position: list[float] = field(metadata=meta("Δaccepted at draft position k / Δdrafts, for k = 0 .. K-1"))
    num_speculative_tokens: int | None = field(default=None, metadata=meta("K: draft positions the server reports"))
    drafts: int | None = field(default=None, metadata=meta("Δ vllm:spec_decode_num_drafts_total"))
    draft_tokens: int | None = field(default=None, metadata=meta("Δ vllm:spec_decode_num_draft_tokens_total"))
    accepted_tokens: int | None = field(default=None, metadata=meta("Δ vllm:spec_decode_num_accepted_tokens_total"))


@dataclass(kw_only=True)
class SpecGroup:
    """Per-request spec-decode statistics (``metrics.speculative_decoding``) summed over a group of requests."""

    key: str = field(metadata=meta("what the group is: 'all', a turn number, a category or a prompt-length bucket"))
    requests: int = field(metadata=meta("successful requests in the group that carried the statistics"))
    spec_steps: int = field(metadata=meta("Σ num_spec_steps (verify steps)"))
    accepted_tokens: int = field(metadata=meta("Σ num_accepted_draft_tokens"))
    draft_tokens: int = field(metadata=meta("Σ num_draft_tokens"))
    acceptance_length: float | None = field(metadata=meta("pooled τ = 1 + Σ accepted / Σ steps"))
    acceptance_rate: float | None = field(metadata=meta("pooled α = Σ accepted / Σ draft tokens"))
    acceptance_length_dist: Distribution = field(
        metadata=meta("per-request τ_r = 1 + accepted_r / steps_r over requests with >= 1 step")
    )
    acceptance_rate_dist: Distribution = field(metadata=meta("per-request α_r = accepted_r / drafted_r"))


@dataclass(kw_only=True)
class SpecPerRequest:
    """Acceptance from each response's own ``metrics.speculative_decoding`` (vLLM
    ``--per-request-spec-decode-metrics``), over the level's successful requests."""

    num_speculative_tokens: int | None = field(metadata=meta("K the responses report (largest seen)"))
    requests_without: int = field(metadata=meta("successful requests that carried no statistics"))
    total: SpecGroup = field(metadata=meta("every request of the level (sums equal the /metrics deltas)"))
    per_position: list[float] = field(
        metadata=meta("Σ steps accepting position k / Σ steps, k = 0 .. K-1 (from the histograms)")
    )
    per_turn: list[SpecGroup] = field(default_factory=list, metadata=meta("by turn number within the conversation"))
    per_category: list[SpecGroup] = field(default_factory=list, metadata=meta("by the prompt's dataset category"))
    per_prompt_length: list[SpecGroup] = field(
        default_factory=list, metadata=meta("by usage.prompt_tokens bucket (powers of two, e.g. '512-1023')")
    )


@dataclass(kw_only=True)
class ClientUsage:
    """The benchmark process's own CPU use over the measured window."""

    cpu_s: float = field(metadata=meta("process CPU seconds (user + system) over the window"))
    cpu_util: float | None = field(
        metadata=meta("cpu_s / window duration: fraction of one core (above 0.7 the run warns)")
    )


@dataclass(kw_only=True)
class TurnResult:
    """One turn number of a level: later turns carry the conversation so far, so prompts grow."""

    turn: int = field(metadata=meta("turn number, 1-based"))
    requests: int = field(metadata=meta("requests sent for this turn"))
    completed: int = field(metadata=meta("successful requests"))
    failed: int = field(metadata=meta("failed requests (cancelled ones excluded)"))
    prompt_tokens: Distribution = field(metadata=meta("usage.prompt_tokens per successful request"))
    output_tokens: int = field(metadata=meta("Σ output tokens of successful requests"))
    ttft_ms: Distribution = field(metadata=meta("TTFT, ms"))
    tpot_ms: Distribution = field(metadata=meta("TPOT, ms"))
    e2el_s: Distribution = field(metadata=meta("E2EL, s"))
    per_user_tok_s: Distribution = field(metadata=meta("1 / TPOT per request"))


@dataclass(kw_only=True)
class RepeatResult:
    """One measured repeat of a level (``--repeats``), with its own window."""

    repeat: int = field(metadata=meta("repeat index, 0-based"))
    duration_s: float = field(metadata=meta("wall time of this repeat's window"))
    completed: int = field(metadata=meta("successful requests"))
    failed: int = field(metadata=meta("failed requests (cancelled ones excluded)"))
    output_tokens: int = field(metadata=meta("Σ output tokens of successful requests"))
    output_tok_s: float | None = field(metadata=meta("output_tokens / duration_s"))
    per_user_tok_s_mean: float | None = field(
        default=None,
        metadata=meta(
            "mean of 1 / TPOT over this repeat's successful requests (files before it lack it)", omit_if_none=True
        ),
    )


@dataclass(kw_only=True)
class RepeatIntervals:
    """Confidence intervals over the repeats of a level (the repeat is the independent unit)."""

    output_tok_s: Interval | None = field(metadata=meta("aggregate output tok/s per repeat"))
    per_user_tok_s: Interval | None = field(metadata=meta("per-repeat mean of 1 / TPOT"))


@dataclass(kw_only=True)
class OpenLoopLevel:
    """An open-loop level (--request-rate): the arrival process asked for, what was achieved, and the local
    queueing that happened before requests reached the socket (not server latency)."""

    request_rate: float | None = field(metadata=meta("conversations started per second asked; null: all at once"))
    arrival: ArrivalName = field(metadata=meta("arrival process of conversation starts"))
    burstiness: float = field(metadata=meta("gamma shape B (1 = poisson); the CV of gaps is 1/sqrt(B)"))
    max_concurrency: int | None = field(metadata=meta("cap on requests in flight; null: none"))
    sessions_started: int = field(metadata=meta("conversations whose first request was sent"))
    achieved_rate: float | None = field(
        metadata=meta("(first-turn sends - 1) / (last first-turn send - first), per repeat, averaged over repeats")
    )
    max_in_flight: int = field(metadata=meta("most requests the client had in flight at once"))
    schedule_lag_ms: Distribution = field(metadata=meta("dispatch - scheduled: how late the client's timer woke"))
    cap_wait_ms: Distribution = field(metadata=meta("admitted - dispatch: time waiting for --max-concurrency"))
    queue_delay_ms: Distribution = field(
        metadata=meta("send - scheduled: all local delay before the request reached the socket")
    )


@dataclass(kw_only=True)
class Goodput:
    """Requests meeting every SLO (--slo): attainment and goodput over the level's measured window."""

    slo: dict[str, float] = field(metadata=meta("the limits: ttft_ms, tpot_ms, e2el_s (max) and user_tok_s (min)"))
    requests: int = field(metadata=meta("requests judged: successful + failed (cancelled excluded)"))
    met: int = field(metadata=meta("successful requests meeting every SLO (a failed request meets none)"))
    attainment: float | None = field(metadata=meta("met / requests"))
    request_goodput: float | None = field(metadata=meta("met / window duration, req/s"))
    output_goodput: float | None = field(metadata=meta("Σ N of requests that met the SLOs / window duration, tok/s"))
    violations: dict[str, int] = field(
        default_factory=dict, metadata=meta("successful requests over each limit (a request may miss several)")
    )


@dataclass(kw_only=True)
class RequestRecords:
    """Raw per-request timestamps (``--record-requests``), seconds relative to ``clock_origin``."""

    clock_origin: float = field(
        metadata=meta("time.perf_counter() reading the times are relative to (on Linux the host's CLOCK_MONOTONIC)")
    )
    records: list[RequestRecord] = field(metadata=meta("one entry per request, fields as in bench/records.py"))


@dataclass(kw_only=True)
class LevelResult:
    """One concurrency level: N sessions x T turns (x repeats), measured over its own window."""

    sessions: int = field(metadata=meta("concurrent sessions N"))
    turns_per_session: int = field(metadata=meta("turns per conversation T"))
    repeats: int | None = field(default=None, metadata=meta("measured repeats"))
    requests: int | None = field(default=None, metadata=meta("requests sent (successful + failed + cancelled)"))
    completed: int = field(metadata=meta("successful requests"))
    failed: int = field(metadata=meta("failed requests, every reason (cancelled ones excluded)"))
    cancelled: int | None = field(default=None, metadata=meta("requests cut off by Ctrl-C / SIGTERM / an abort"))
    failures: dict[str, int] = field(default_factory=dict, metadata=meta("failed requests by reason"))
    failure_examples: dict[str, str] = field(default_factory=dict, metadata=meta("first detail seen for each reason"))
    output_tokens: int = field(metadata=meta("Σ N over successful requests"))
    input_tokens: int | None = field(default=None, metadata=meta("Σ usage.prompt_tokens over successful requests"))
    duration_s: float = field(metadata=meta("wall time of the measured window (sum over repeats)"))
    output_tok_s: float | None = field(metadata=meta("aggregate output tok/s: output_tokens / duration_s"))
    request_throughput: float | None = field(default=None, metadata=meta("successful requests / duration_s"))
    ttft_ms: Distribution = field(metadata=meta("TTFT = first token-bearing chunk - send, ms"))
    tpot_ms: Distribution = field(metadata=meta("TPOT = (E2EL - TTFT) / (N - 1), requests with N >= 2, ms"))
    e2el_s: Distribution = field(
        metadata=meta("E2EL = last token-bearing chunk - send (non-streaming: end of body), s")
    )
    per_user_tok_s: Distribution = field(
        metadata=meta("per-user tok/s = 1 / TPOT per request: the decode speed a user sees")
    )
    per_user_tok_s_e2el: Distribution | None = field(
        default=None, metadata=meta("N / E2EL per request (includes the wait)")
    )
    itl_ms: Distribution | None = field(
        default=None,
        metadata=meta(
            "gap between consecutive token-bearing chunks (per verify step under speculation, not per token), ms"
        ),
    )
    tokens_per_chunk: Distribution | None = field(default=None, metadata=meta("N / token-bearing chunks per request"))
    output_tokens_per_request: Distribution | None = field(default=None, metadata=meta("N per successful request"))
    prompt_tokens_per_request: Distribution | None = field(
        default=None, metadata=meta("usage.prompt_tokens per request")
    )
    client_send_ms: Distribution | None = field(
        default=None,
        metadata=meta("send - ready: client time before the request reached the socket (not server latency), ms"),
    )
    tokens_counted_from_chunks: int | None = field(
        default=None,
        metadata=meta("successful requests without usage whose N is their chunk count (undercounts under speculation)"),
    )
    tpot_excluded_short: int | None = field(default=None, metadata=meta("successful requests with N < 2 (no TPOT)"))
    spec_decode: SpecDecode | None = field(
        metadata=meta("null when the server does no speculation (see spec_decode_status)")
    )
    spec_decode_status: SpecDecodeStatus | None = field(
        default=None,
        metadata=meta(
            "ok | absent (no counters) | no_drafts | counter_reset (server restarted) | unavailable (/metrics unread)"
        ),
    )
    client: ClientUsage | None = field(default=None, metadata=meta("the benchmark's own CPU use"))
    per_turn: list[TurnResult] = field(default_factory=list, metadata=meta("breakdown by turn number"))
    repeat_results: list[RepeatResult] = field(default_factory=list, metadata=meta("each repeat's own figures"))
    partial: bool = field(default=False, metadata=meta("the run stopped before this level finished"))
    request_records: RequestRecords | None = field(
        default=None, metadata=meta("raw timestamps, only with --record-requests", omit_if_none=True)
    )
    open_loop: OpenLoopLevel | None = field(
        default=None, metadata=meta("open-loop arrivals and local queueing (--request-rate)", omit_if_none=True)
    )
    goodput: Goodput | None = field(default=None, metadata=meta("SLO attainment (--slo)", omit_if_none=True))
    intervals: RepeatIntervals | None = field(
        default=None, metadata=meta("confidence intervals over repeats (--repeats >= 2)", omit_if_none=True)
    )
    spec_per_request: SpecPerRequest | None = field(
        default=None,
        metadata=meta("per-request acceptance, when the server sends metrics.speculative_decoding", omit_if_none=True),
    )
    reply_hashes: dict[str, str] | None = field(
        default=None,
        metadata=meta(
            "reply_sha256 of every successful request, keyed 'repeat/session/k' (k: the session's k-th request, "
            "0-based): compare matches them across runs",
            omit_if_none=True,
        ),
    )


@dataclass(kw_only=True)
class ToolInfo:
    """What produced the file."""

    name: str = field(metadata=meta("benchmark_multi_turn"))
    version: str = field(metadata=meta("kimi_dflash package version"))
    git_revision: str | None = field(metadata=meta("HEAD of the checkout (+ '-dirty'); null outside a git checkout"))
    python: str | None = field(default=None, metadata=meta("Python version"))
    aiohttp: str | None = field(default=None, metadata=meta("aiohttp version"))
    numpy: str | None = field(default=None, metadata=meta("numpy version"))
    event_loop: str | None = field(default=None, metadata=meta("uvloop or asyncio"))
    host: str | None = field(default=None, metadata=meta("hostname of the client"))


@dataclass(kw_only=True)
class RunInfo:
    """When and how the run went."""

    label: str | None = field(metadata=meta("`--label`"))
    started_at: str = field(metadata=meta("UTC, ISO 8601"))
    finished_at: str | None = field(default=None, metadata=meta("UTC, ISO 8601; null while running"))
    status: RunStatus = field(metadata=meta("running while in progress; then how it ended"))
    status_detail: str | None = field(default=None, metadata=meta("why it stopped, when not complete"))
    exit_code: int | None = field(default=None, metadata=meta("the process's exit status; null while running"))
    command_line: list[str] = field(metadata=meta("argv, with the API key replaced by `***`"))


@dataclass(kw_only=True)
class ServerInfo:
    """What the server said about itself at the start."""

    base_url: str | None = field(default=None, metadata=meta("server root"))
    models: list[dict[str, Any]] = field(default_factory=list, metadata=meta("/v1/models entries as served"))
    version: str | None = field(default=None, metadata=meta("/version"))
    version_error: str | None = field(default=None, metadata=meta("why /version could not be read", omit_if_none=True))
    metrics_url: str | None = field(default=None, metadata=meta("Prometheus endpoint"))
    cache_config: dict[str, str] | None = field(default=None, metadata=meta("labels of vllm:cache_config_info"))
    spec_decode_counters: bool | None = field(default=None, metadata=meta("the server exports spec-decode counters"))
    metrics_error: str | None = field(default=None, metadata=meta("why /metrics could not be read", omit_if_none=True))
    notes: list[str] | None = field(
        default=None, metadata=meta("warnings about the server (e.g. prefix caching on)", omit_if_none=True)
    )


@dataclass(kw_only=True)
class WarmupSummary:
    """Requests sent before the first level (not measured)."""

    requests: int = field(default=0, metadata=meta("warmup requests sent"))
    completed: int = field(default=0, metadata=meta("successful warmup requests"))
    failures: dict[str, int] = field(default_factory=dict, metadata=meta("failed warmup requests by reason"))
    failure_examples: dict[str, str] = field(default_factory=dict, metadata=meta("first detail for each reason"))
    duration_s: float = field(default=0.0, metadata=meta("wall time of the warmup"))


@dataclass(kw_only=True)
class ServerConfig:
    """The server configuration a sweep point ran (written by the sweep launcher; the benchmark cannot know it)."""

    config: str = field(metadata=meta("config file the server was started from, as given"))
    overrides: dict[str, str] = field(default_factory=dict, metadata=meta("config keys the sweep point set"))
    values: dict[str, str] = field(
        default_factory=dict, metadata=meta("every config key after overrides and defaults (API_KEY never stored)")
    )


@dataclass(kw_only=True)
class BenchmarkResult:
    """A benchmark result file: one run of payload/benchmark_multi_turn.py, one object per concurrency level."""

    schema: Literal["kimi-dflash/benchmark-result"] = field(metadata=meta("always kimi-dflash/benchmark-result"))
    schema_version: int = field(metadata=meta("bumped when a field is renamed, removed or changes meaning"))
    tool: ToolInfo = field(metadata=meta("what produced the file"))
    run: RunInfo = field(metadata=meta("when and how the run went"))
    settings: Settings = field(metadata=meta("what was measured"))
    server: ServerInfo | None = field(metadata=meta("what the server said about itself; null before it was reached"))
    warmup: WarmupSummary | None = field(default=None, metadata=meta("the warmup; null before it ran"))
    results: list[LevelResult] = field(metadata=meta("one object per concurrency level, in the order measured"))
    server_config: ServerConfig | None = field(
        default=None, metadata=meta("the server's config, when a sweep started it", omit_if_none=True)
    )

    @property
    def levels(self) -> dict[int, LevelResult]:
        """Results by session count (the last one wins if a level was measured twice)."""
        return {level.sessions: level for level in self.results}

    def to_json(self) -> dict[str, Any]:
        return adapter().dump_python(self, mode="json")


@functools.cache
def adapter() -> TypeAdapter[BenchmarkResult]:
    """pydantic over the dataclasses above: validation naming each problem's path, the JSON dump, the JSON
    Schema. Built on first use (it compiles a validator) so importing this module stays cheap."""
    return TypeAdapter(BenchmarkResult)


_EXPECTED = {
    "float_type": "a number",
    "int_type": "an integer",
    "string_type": "a string",
    "bool_type": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "dataclass_type": "an object",
    "model_type": "an object",
}


def _describe(data: Any) -> str:
    if data is None:
        return "null"
    if isinstance(data, bool):
        return "a boolean"
    if isinstance(data, (int, float)):
        return "a number"
    if isinstance(data, str):
        return f"the string {data[:40]!r}"
    return {list: "an array", dict: "an object"}.get(type(data), type(data).__name__)


def _path(loc: tuple[int | str, ...]) -> str:
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


def _problem(error: Any) -> str:
    """One pydantic error as ``$.json.path: expected X, got Y`` (or ``: missing``)."""
    where = _path(error["loc"])
    if error["type"] == "missing":
        return f"{where}: missing"
    if error["type"] == "literal_error":
        expected = f"one of {error['ctx']['expected']}"
    else:
        expected = _EXPECTED.get(error["type"], error["msg"])
    return f"{where}: expected {expected}, got {_describe(error['input'])}"


def _problems(document: Any) -> tuple[BenchmarkResult | None, list[str]]:
    # Strict JSON-mode validation: numbers are not read from strings nor booleans from numbers, an integer
    # is accepted where a number is expected, and keys the model does not know are ignored (a newer writer
    # of the same version may add fields).
    try:
        return adapter().validate_json(json.dumps(document), strict=True), []
    except ValidationError as error:
        return None, [_problem(e) for e in error.errors()]


def version_problem(document: Any, source: str) -> str | None:
    """Why ``document`` is not a version of our schema this tool reads (None: it is)."""
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        return f'{source}: not a benchmark result (expected "schema": "{SCHEMA}")'
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        return f"{source}: schema_version {version!r} is not an integer"
    if version > SCHEMA_VERSION:
        return (
            f"{source}: schema_version {version} was written by a newer kimi-dflash; this one reads version "
            f"{SCHEMA_VERSION}. Upgrade kimi-dflash to read it"
        )
    if version != SCHEMA_VERSION:
        return f"{source}: schema_version {version} is unknown; this tool reads version {SCHEMA_VERSION}"
    return None


def parse_result(document: Any, source: str = "result") -> BenchmarkResult:
    """A result from JSON data, refusing anything that is not a known version of our schema."""
    problem = version_problem(document, source)
    if problem is not None:
        raise UserError(problem + ".")
    result, problems = _problems(document)
    if result is None:
        shown = "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        raise UserError(f"{source}: not a valid result file: {shown}.")
    return result


def load_result(path: Path | str) -> BenchmarkResult:
    """Read a result file (see ``parse_result``) through the guarded reader: a regular UTF-8 file of at most
    RESULT_MAX_BYTES, JSON nesting capped (UnreadableFile, exit 2, otherwise)."""
    path = Path(path)
    document = read_user_json(path, what="result file", max_bytes=RESULT_MAX_BYTES)
    return parse_result(document, str(path))


def validate_document(document: Any) -> list[str]:
    """Problems with a result document as JSON data, each named by its JSON path (empty list: valid)."""
    problem = version_problem(document, "document")
    if problem is not None:
        return [problem]
    return _problems(document)[1]
