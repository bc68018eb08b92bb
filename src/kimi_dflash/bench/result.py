"""The result file as one typed model (docs/benchmark.md's field reference is generated from it). Adding a field
keeps SCHEMA_VERSION (give it a default: older files lack it); renaming or removing one, or changing its meaning,
bumps it, and ``load_result`` refuses versions it does not know."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from kimi_dflash.bench.arrivals import ArrivalName
from kimi_dflash.bench.intervals import Interval
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.settings import Settings
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.options import doc
from kimi_dflash.core.user_files import MiB, read_user_json

SCHEMA = "kimi-dflash/benchmark-result"
SCHEMA_VERSION = 1
RESULT_MAX_BYTES = 1024 * MiB  # --record-requests keeps every chunk's timestamp: hundreds of MB for a long run

RunStatus = Literal["running", "complete", "interrupted", "aborted", "failed", "crashed"]
SpecDecodeStatus = Literal["ok", "absent", "no_drafts", "counter_reset", "unavailable"]


@dataclass(kw_only=True)
class Distribution:
    """Summary of a per-request quantity over a level's successful requests (numpy's linear-interpolation
    percentiles, as ``vllm bench serve`` uses). With no values every statistic is null and count is 0."""

    mean: float | None = doc("arithmetic mean")
    p50: float | None = doc("median")
    p90: float | None = doc("90th percentile", default=None)
    p95: float | None = doc("95th percentile")
    p99: float | None = doc("99th percentile")
    min: float | None = doc("smallest value", default=None)
    max: float | None = doc("largest value", default=None)
    std: float | None = doc("population standard deviation", default=None)
    count: int | None = doc("number of values", default=None)
    percentiles: dict[str, float | None] | None = doc(
        "the percentiles asked with --percentiles, keyed p<q> (e.g. p99.9)", omit_if_none=True
    )


@dataclass(kw_only=True)
class SpecDecode:
    """Speculative decoding over the measured window, from vLLM's /metrics counter deltas (Δ)."""

    acceptance_rate: float = doc("Δaccepted tokens / Δdraft tokens (a fraction, not a percentage)")
    acceptance_length: float = doc("mean acceptance length τ = 1 + Δaccepted / Δdrafts")
    per_position: list[float] = doc("Δaccepted at draft position k / Δdrafts, for k = 0 .. K-1")
    num_speculative_tokens: int | None = doc("K: draft positions the server reports", default=None)
    drafts: int | None = doc("Δ vllm:spec_decode_num_drafts_total", default=None)
    draft_tokens: int | None = doc("Δ vllm:spec_decode_num_draft_tokens_total", default=None)
    accepted_tokens: int | None = doc("Δ vllm:spec_decode_num_accepted_tokens_total", default=None)


@dataclass(kw_only=True)
class SpecGroup:
    """Per-request spec-decode statistics (``metrics.speculative_decoding``) summed over a group of requests."""

    key: str = doc("what the group is: 'all', a turn number, a category or a prompt-length bucket")
    requests: int = doc("successful requests in the group that carried the statistics")
    spec_steps: int = doc("Σ num_spec_steps (verify steps)")
    accepted_tokens: int = doc("Σ num_accepted_draft_tokens")
    draft_tokens: int = doc("Σ num_draft_tokens")
    acceptance_length: float | None = doc("pooled τ = 1 + Σ accepted / Σ steps")
    acceptance_rate: float | None = doc("pooled α = Σ accepted / Σ draft tokens")
    acceptance_length_dist: Distribution = doc("per-request τ_r = 1 + accepted_r / steps_r over requests with ≥ 1 step")
    acceptance_rate_dist: Distribution = doc("per-request α_r = accepted_r / drafted_r")


@dataclass(kw_only=True)
class SpecPerRequest:
    """Acceptance from each response's own ``metrics.speculative_decoding`` (vLLM
    ``--per-request-spec-decode-metrics``), over the level's successful requests."""

    num_speculative_tokens: int | None = doc("K the responses report (largest seen)")
    requests_without: int = doc("successful requests that carried no statistics")
    total: SpecGroup = doc("every request of the level (sums equal the /metrics deltas)")
    per_position: list[float] = doc("Σ steps accepting position k / Σ steps, k = 0 .. K-1 (from the histograms)")
    per_turn: list[SpecGroup] = doc("by turn number within the conversation", factory=list)
    per_category: list[SpecGroup] = doc("by the prompt's dataset category", factory=list)
    per_prompt_length: list[SpecGroup] = doc("by usage.prompt_tokens bucket (powers of 2: '512-1023')", factory=list)


@dataclass(kw_only=True)
class ClientUsage:
    """The benchmark process's own CPU use over the measured window."""

    cpu_s: float = doc("process CPU seconds (user + system) over the window")
    cpu_util: float | None = doc("cpu_s / window duration: fraction of one core (above 0.7 the run warns)")


@dataclass(kw_only=True)
class TurnResult:
    """One turn number of a level: later turns carry the conversation so far, so prompts grow."""

    turn: int = doc("turn number, 1-based")
    requests: int = doc("requests sent for this turn")
    completed: int = doc("successful requests")
    failed: int = doc("failed requests (cancelled ones excluded)")
    prompt_tokens: Distribution = doc("usage.prompt_tokens per successful request")
    output_tokens: int = doc("Σ output tokens of successful requests")
    ttft_ms: Distribution = doc("TTFT, ms")
    tpot_ms: Distribution = doc("TPOT, ms")
    e2el_s: Distribution = doc("E2EL, s")
    per_user_tok_s: Distribution = doc("1 / TPOT per request")


@dataclass(kw_only=True)
class RepeatResult:
    """One measured repeat of a level (``--repeats``), with its own window."""

    repeat: int = doc("repeat index, 0-based")
    duration_s: float = doc("wall time of this repeat's window")
    completed: int = doc("successful requests")
    failed: int = doc("failed requests (cancelled ones excluded)")
    output_tokens: int = doc("Σ output tokens of successful requests")
    output_tok_s: float | None = doc("output_tokens / duration_s")
    per_user_tok_s_mean: float | None = doc(
        "mean of 1 / TPOT over this repeat's successful requests (files before it lack it)", omit_if_none=True
    )


@dataclass(kw_only=True)
class RepeatIntervals:
    """Confidence intervals over the repeats of a level (the repeat is the independent unit)."""

    output_tok_s: Interval | None = doc("aggregate output tok/s per repeat")
    per_user_tok_s: Interval | None = doc("per-repeat mean of 1 / TPOT")


@dataclass(kw_only=True)
class OpenLoopLevel:
    """An open-loop level (--request-rate): the arrival process asked for, what was achieved, and the local
    queueing that happened before requests reached the socket (not server latency)."""

    request_rate: float | None = doc("conversations started per second asked; null: all at once")
    arrival: ArrivalName = doc("arrival process of conversation starts")
    burstiness: float = doc("gamma shape B (1 = poisson); the CV of gaps is 1/sqrt(B)")
    max_concurrency: int | None = doc("cap on requests in flight; null: none")
    sessions_started: int = doc("conversations whose first request was sent")
    achieved_rate: float | None = doc(
        "(first-turn sends - 1) / (last first-turn send - first), per repeat, averaged over repeats"
    )
    max_in_flight: int = doc("most requests the client had in flight at once")
    schedule_lag_ms: Distribution = doc("dispatch - scheduled: how late the client's timer woke")
    cap_wait_ms: Distribution = doc("admitted - dispatch: time waiting for --max-concurrency")
    queue_delay_ms: Distribution = doc("send - scheduled: all local delay before the request reached the socket")


@dataclass(kw_only=True)
class Goodput:
    """Requests meeting every SLO (--slo): attainment and goodput over the level's measured window."""

    slo: dict[str, float] = doc("the limits: ttft_ms, tpot_ms, e2el_s (max) and user_tok_s (min)")
    requests: int = doc("requests judged: successful + failed (cancelled excluded)")
    met: int = doc("successful requests meeting every SLO (a failed request meets none)")
    attainment: float | None = doc("met / requests")
    request_goodput: float | None = doc("met / window duration, req/s")
    output_goodput: float | None = doc("Σ N of requests that met the SLOs / window duration, tok/s")
    violations: dict[str, int] = doc("successful requests over each limit (a request may miss several)", factory=dict)


@dataclass(kw_only=True)
class RequestRecords:
    """Raw per-request timestamps (``--record-requests``), seconds relative to ``clock_origin``."""

    clock_origin: float = doc(
        "time.perf_counter() reading the times are relative to (on Linux the host's CLOCK_MONOTONIC)"
    )
    records: list[RequestRecord] = doc("one entry per request, fields as in bench/records.py")


@dataclass(kw_only=True)
class LevelResult:
    """One concurrency level: N sessions x T turns (x repeats), measured over its own window."""

    sessions: int = doc("concurrent sessions N")
    turns_per_session: int = doc("turns per conversation T")
    repeats: int | None = doc("measured repeats", default=None)
    requests: int | None = doc("requests sent (successful + failed + cancelled)", default=None)
    completed: int = doc("successful requests")
    failed: int = doc("failed requests, every reason (cancelled ones excluded)")
    cancelled: int | None = doc("requests cut off by Ctrl-C / SIGTERM / an abort", default=None)
    failures: dict[str, int] = doc("failed requests by reason", factory=dict)
    failure_examples: dict[str, str] = doc("first detail seen for each reason", factory=dict)
    output_tokens: int = doc("Σ N over successful requests")
    input_tokens: int | None = doc("Σ usage.prompt_tokens over successful requests", default=None)
    duration_s: float = doc("wall time of the measured window (sum over repeats)")
    output_tok_s: float | None = doc("aggregate output tok/s: output_tokens / duration_s")
    request_throughput: float | None = doc("successful requests / duration_s", default=None)
    ttft_ms: Distribution = doc("TTFT = first token-bearing chunk - send, ms")
    tpot_ms: Distribution = doc("TPOT = (E2EL - TTFT) / (N - 1), requests with N >= 2, ms")
    e2el_s: Distribution = doc("E2EL = last token-bearing chunk - send (non-streaming: end of body), s")
    per_user_tok_s: Distribution = doc("per-user tok/s = 1 / TPOT per request: the decode speed a user sees")
    per_user_tok_s_e2el: Distribution | None = doc("N / E2EL per request (includes the wait)", default=None)
    itl_ms: Distribution | None = doc(
        "gap between consecutive token-bearing chunks (per verify step under speculation, not per token), ms",
        default=None,
    )
    tokens_per_chunk: Distribution | None = doc("N / token-bearing chunks per request", default=None)
    output_tokens_per_request: Distribution | None = doc("N per successful request", default=None)
    prompt_tokens_per_request: Distribution | None = doc("usage.prompt_tokens per request", default=None)
    client_send_ms: Distribution | None = doc(
        "send - ready: client time before the request reached the socket (not server latency), ms", default=None
    )
    tokens_counted_from_chunks: int | None = doc(
        "successful requests without usage whose N is their chunk count (undercounts under speculation)", default=None
    )
    tpot_excluded_short: int | None = doc("successful requests with N < 2 (no TPOT)", default=None)
    spec_decode: SpecDecode | None = doc("null when the server does no speculation (see spec_decode_status)")
    spec_decode_status: SpecDecodeStatus | None = doc(
        "ok | absent (no counters) | no_drafts | counter_reset (server restarted) | unavailable (/metrics unread)",
        default=None,
    )
    client: ClientUsage | None = doc("the benchmark's own CPU use", default=None)
    per_turn: list[TurnResult] = doc("breakdown by turn number", factory=list)
    repeat_results: list[RepeatResult] = doc("each repeat's own figures", factory=list)
    partial: bool = doc("the run stopped before this level finished", default=False)
    request_records: RequestRecords | None = doc("raw timestamps, only with --record-requests", omit_if_none=True)
    open_loop: OpenLoopLevel | None = doc("open-loop arrivals and local queueing (--request-rate)", omit_if_none=True)
    goodput: Goodput | None = doc("SLO attainment (--slo)", omit_if_none=True)
    intervals: RepeatIntervals | None = doc("confidence intervals over repeats (--repeats >= 2)", omit_if_none=True)
    spec_per_request: SpecPerRequest | None = doc(
        "per-request acceptance, when the server sends metrics.speculative_decoding", omit_if_none=True
    )
    reply_hashes: dict[str, str] | None = doc(
        "reply_sha256 of every successful request, keyed 'repeat/session/k' (k: the session's k-th request, "
        "0-based): compare matches them across runs",
        omit_if_none=True,
    )

    @property
    def load(self) -> float:
        """What the level is keyed by: its session count, or an open loop's rate (inf: all at once)."""
        if self.open_loop is None:
            return self.sessions
        rate = self.open_loop.request_rate
        return math.inf if rate is None else rate


@dataclass(kw_only=True)
class ToolInfo:
    """What produced the file."""

    name: str = doc("benchmark_multi_turn")
    version: str = doc("kimi_dflash package version")
    git_revision: str | None = doc("HEAD of the checkout (+ '-dirty'); null outside a git checkout")
    python: str | None = doc("Python version", default=None)
    aiohttp: str | None = doc("aiohttp version", default=None)
    numpy: str | None = doc("numpy version", default=None)
    event_loop: str | None = doc("uvloop or asyncio", default=None)
    host: str | None = doc("hostname of the client", default=None)


@dataclass(kw_only=True)
class RunInfo:
    """When and how the run went."""

    label: str | None = doc("`--label`")
    started_at: str = doc("UTC, ISO 8601")
    finished_at: str | None = doc("UTC, ISO 8601; null while running", default=None)
    status: RunStatus = doc("running while in progress; then how it ended")
    status_detail: str | None = doc("why it stopped, when not complete", default=None)
    exit_code: int | None = doc("the process's exit status; null while running", default=None)
    command_line: list[str] = doc("argv, with the API key replaced by `***`")


@dataclass(kw_only=True)
class ServerInfo:
    """What the server said about itself at the start."""

    base_url: str | None = doc("server root", default=None)
    models: list[dict[str, Any]] = doc("/v1/models entries as served", factory=list)
    version: str | None = doc("/version", default=None)
    version_error: str | None = doc("why /version could not be read", omit_if_none=True)
    metrics_url: str | None = doc("Prometheus endpoint", default=None)
    cache_config: dict[str, str] | None = doc("labels of vllm:cache_config_info", default=None)
    spec_decode_counters: bool | None = doc("the server exports spec-decode counters", default=None)
    metrics_error: str | None = doc("why /metrics could not be read", omit_if_none=True)
    notes: list[str] | None = doc("warnings about the server (e.g. prefix caching on)", omit_if_none=True)


@dataclass(kw_only=True)
class WarmupSummary:
    """Requests sent before the first level (not measured)."""

    requests: int = doc("warmup requests sent", default=0)
    completed: int = doc("successful warmup requests", default=0)
    failures: dict[str, int] = doc("failed warmup requests by reason", factory=dict)
    failure_examples: dict[str, str] = doc("first detail for each reason", factory=dict)
    duration_s: float = doc("wall time of the warmup", default=0.0)


@dataclass(kw_only=True)
class ServerConfig:
    """The server configuration a sweep point ran (written by the sweep launcher; the benchmark cannot know it)."""

    config: str = doc("config file the server was started from, as given")
    overrides: dict[str, str] = doc("config keys the sweep point set", factory=dict)
    values: dict[str, str] = doc("every config key after overrides and defaults (API_KEY never stored)", factory=dict)


@dataclass(kw_only=True)
class BenchmarkResult:
    """A benchmark result file: one run of payload/benchmark_multi_turn.py, one object per concurrency level."""

    schema: Literal["kimi-dflash/benchmark-result"] = doc("always kimi-dflash/benchmark-result")
    schema_version: int = doc("bumped when a field is renamed, removed or changes meaning")
    tool: ToolInfo = doc("what produced the file")
    run: RunInfo = doc("when and how the run went")
    settings: Settings = doc("what was measured")
    server: ServerInfo | None = doc("what the server said about itself; null before it was reached")
    warmup: WarmupSummary | None = doc("the warmup; null before it ran", default=None)
    results: list[LevelResult] = doc("one object per concurrency level, in the order measured")
    server_config: ServerConfig | None = doc("the server's config, when a sweep started it", omit_if_none=True)

    @property
    def levels(self) -> dict[float, LevelResult]:
        """Results by load (``LevelResult.load``; the last one wins if a level was measured twice)."""
        return {level.load: level for level in self.results}

    def to_json(self) -> dict[str, Any]:
        return adapter().dump_python(self, mode="json")

    def to_json_text(self) -> str:
        """The file's text: UTF-8 as is; NaN and Infinity refused (ValueError: they are not JSON)."""
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"

    def save(self, path: Path) -> None:
        write_text_atomic(path, self.to_json_text())


@functools.cache
def adapter() -> TypeAdapter[BenchmarkResult]:
    """pydantic over the dataclasses above, built on first use (it compiles a validator) to keep imports cheap."""
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


def parse_result(document: Any, source: str = "result") -> BenchmarkResult:
    """A result from JSON data; UserError (naming each problem's path) for anything but a known schema version."""
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise UserError(f'{source}: not a benchmark result (expected "schema": "{SCHEMA}").')
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise UserError(f"{source}: schema_version {version!r} is not an integer.")
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{source}: schema_version {version} was written by a newer kimi-dflash; this one reads version "
            f"{SCHEMA_VERSION}. Upgrade kimi-dflash to read it."
        )
    if version != SCHEMA_VERSION:
        raise UserError(f"{source}: schema_version {version} is unknown; this tool reads version {SCHEMA_VERSION}.")
    # Strict: no numbers from strings; unknown keys are ignored (a newer writer of this version may add fields).
    try:
        return adapter().validate_json(json.dumps(document), strict=True)
    except ValidationError as error:
        problems = [_problem(e) for e in error.errors()]
    shown = "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
    raise UserError(f"{source}: not a valid result file: {shown}.")


def load_result(path: Path | str) -> BenchmarkResult:
    """Read a result file (see ``parse_result``) through the guarded reader, at most RESULT_MAX_BYTES."""
    path = Path(path)
    document = read_user_json(path, what="result file", max_bytes=RESULT_MAX_BYTES)
    return parse_result(document, str(path))
