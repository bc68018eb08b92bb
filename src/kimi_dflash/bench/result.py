"""The result file as one typed model: metrics fill it, the CLI writes it, every reader loads it.

Schema ``kimi-dflash/benchmark-result``, version ``SCHEMA_VERSION``. Adding a field keeps the version (give
it a default: files written before it existed lack it); renaming or removing one, or changing its meaning,
bumps the version, and ``load_result`` refuses versions it does not know. Metric definitions are in
``metrics.py`` and docs/benchmark.md; the field reference and JSON Schema in docs are generated from this
module (``python -m kimi_dflash.bench.result_schema --write``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kimi_dflash.bench.errors import UserError
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.typed_json import SchemaError, described, from_json, to_json

SCHEMA = "kimi-dflash/benchmark-result"
SCHEMA_VERSION = 1

RunStatus = Literal["running", "complete", "interrupted", "aborted", "failed", "crashed"]
SpecDecodeStatus = Literal["ok", "absent", "no_drafts", "counter_reset", "unavailable"]
PromptOrder = Literal["random", "sequential"]


@dataclass(kw_only=True)
class Distribution:
    """Summary of a per-request quantity over a level's successful requests (numpy's linear-interpolation
    percentiles, as ``vllm bench serve`` uses). With no values every statistic is null and count is 0."""

    mean: float | None = described("arithmetic mean")
    p50: float | None = described("median")
    p90: float | None = described("90th percentile", default=None)
    p95: float | None = described("95th percentile")
    p99: float | None = described("99th percentile")
    min: float | None = described("smallest value", default=None)
    max: float | None = described("largest value", default=None)
    std: float | None = described("population standard deviation", default=None)
    count: int | None = described("number of values", default=None)


@dataclass(kw_only=True)
class SpecDecode:
    """Speculative decoding over the measured window, from vLLM's /metrics counter deltas (Δ)."""

    acceptance_rate: float = described("Δaccepted tokens / Δdraft tokens (a fraction, not a percentage)")
    acceptance_length: float = described("mean acceptance length τ = 1 + Δaccepted / Δdrafts")
    per_position: list[float] = described("Δaccepted at draft position k / Δdrafts, for k = 0 .. K-1")
    num_speculative_tokens: int | None = described("K: draft positions the server reports", default=None)
    drafts: int | None = described("Δ vllm:spec_decode_num_drafts_total", default=None)
    draft_tokens: int | None = described("Δ vllm:spec_decode_num_draft_tokens_total", default=None)
    accepted_tokens: int | None = described("Δ vllm:spec_decode_num_accepted_tokens_total", default=None)


@dataclass(kw_only=True)
class ClientUsage:
    """The benchmark process's own CPU use over the measured window."""

    cpu_s: float = described("process CPU seconds (user + system) over the window")
    cpu_util: float | None = described("cpu_s / window duration: fraction of one core (above 0.7 the run warns)")


@dataclass(kw_only=True)
class TurnResult:
    """One turn number of a level: later turns carry the conversation so far, so prompts grow."""

    turn: int = described("turn number, 1-based")
    requests: int = described("requests sent for this turn")
    completed: int = described("successful requests")
    failed: int = described("failed requests (cancelled ones excluded)")
    prompt_tokens: Distribution = described("usage.prompt_tokens per successful request")
    output_tokens: int = described("Σ output tokens of successful requests")
    ttft_ms: Distribution = described("TTFT, ms")
    tpot_ms: Distribution = described("TPOT, ms")
    e2el_s: Distribution = described("E2EL, s")
    per_user_tok_s: Distribution = described("1 / TPOT per request")


@dataclass(kw_only=True)
class RepeatResult:
    """One measured repeat of a level (``--repeats``), with its own window."""

    repeat: int = described("repeat index, 0-based")
    duration_s: float = described("wall time of this repeat's window")
    completed: int = described("successful requests")
    failed: int = described("failed requests (cancelled ones excluded)")
    output_tokens: int = described("Σ output tokens of successful requests")
    output_tok_s: float | None = described("output_tokens / duration_s")


@dataclass(kw_only=True)
class RequestRecords:
    """Raw per-request timestamps (``--record-requests``), seconds relative to ``clock_origin``."""

    clock_origin: float = described(
        "time.perf_counter() reading the times are relative to (on Linux the host's CLOCK_MONOTONIC)"
    )
    records: list[RequestRecord] = described("one entry per request, fields as in bench/records.py")


@dataclass(kw_only=True)
class LevelResult:
    """One concurrency level: N sessions x T turns (x repeats), measured over its own window."""

    sessions: int = described("concurrent sessions N")
    turns_per_session: int = described("turns per conversation T")
    repeats: int | None = described("measured repeats", default=None)
    requests: int | None = described("requests sent (successful + failed + cancelled)", default=None)
    completed: int = described("successful requests")
    failed: int = described("failed requests, every reason (cancelled ones excluded)")
    cancelled: int | None = described("requests cut off by Ctrl-C / SIGTERM / an abort", default=None)
    failures: dict[str, int] = described("failed requests by reason", default_factory=dict)
    failure_examples: dict[str, str] = described("first detail seen for each reason", default_factory=dict)
    output_tokens: int = described("Σ N over successful requests")
    input_tokens: int | None = described("Σ usage.prompt_tokens over successful requests", default=None)
    duration_s: float = described("wall time of the measured window (sum over repeats)")
    output_tok_s: float | None = described("aggregate output tok/s: output_tokens / duration_s")
    request_throughput: float | None = described("successful requests / duration_s", default=None)
    ttft_ms: Distribution = described("TTFT = first token-bearing chunk - send, ms")
    tpot_ms: Distribution = described("TPOT = (E2EL - TTFT) / (N - 1), requests with N >= 2, ms")
    e2el_s: Distribution = described("E2EL = last token-bearing chunk - send (non-streaming: end of body), s")
    per_user_tok_s: Distribution = described("per-user tok/s = 1 / TPOT per request: the decode speed a user sees")
    per_user_tok_s_e2el: Distribution | None = described("N / E2EL per request (includes the wait)", default=None)
    itl_ms: Distribution | None = described(
        "gap between consecutive token-bearing chunks (per verify step under speculation, not per token), ms",
        default=None,
    )
    tokens_per_chunk: Distribution | None = described("N / token-bearing chunks per request", default=None)
    output_tokens_per_request: Distribution | None = described("N per successful request", default=None)
    prompt_tokens_per_request: Distribution | None = described("usage.prompt_tokens per request", default=None)
    client_send_ms: Distribution | None = described(
        "send - ready: client time before the request reached the socket (not server latency), ms", default=None
    )
    tokens_counted_from_chunks: int | None = described(
        "successful requests without usage whose N is their chunk count (undercounts under speculation)",
        default=None,
    )
    tpot_excluded_short: int | None = described("successful requests with N < 2 (no TPOT)", default=None)
    spec_decode: SpecDecode | None = described("null when the server does no speculation (see spec_decode_status)")
    spec_decode_status: SpecDecodeStatus | None = described(
        "ok | absent (no counters) | no_drafts | counter_reset (server restarted) | unavailable (/metrics unread)",
        default=None,
    )
    client: ClientUsage | None = described("the benchmark's own CPU use", default=None)
    per_turn: list[TurnResult] = described("breakdown by turn number", default_factory=list)
    repeat_results: list[RepeatResult] = described("each repeat's own figures", default_factory=list)
    partial: bool = described("the run stopped before this level finished", default=False)
    request_records: RequestRecords | None = described(
        "raw timestamps, only with --record-requests", default=None, omit_if_none=True
    )


@dataclass(kw_only=True)
class ToolInfo:
    """What produced the file."""

    name: str = described("benchmark_multi_turn")
    version: str = described("kimi_dflash package version")
    git_revision: str | None = described("HEAD of the checkout (+ '-dirty'); null outside a git checkout")
    python: str | None = described("Python version", default=None)
    aiohttp: str | None = described("aiohttp version", default=None)
    numpy: str | None = described("numpy version", default=None)
    event_loop: str | None = described("uvloop or asyncio", default=None)
    host: str | None = described("hostname of the client", default=None)


@dataclass(kw_only=True)
class RunInfo:
    """When and how the run went."""

    label: str | None = described("`--label`")
    started_at: str = described("UTC, ISO 8601")
    finished_at: str | None = described("UTC, ISO 8601; null while running", default=None)
    status: RunStatus = described("running while in progress; then how it ended")
    status_detail: str | None = described("why it stopped, when not complete", default=None)
    exit_code: int | None = described("the process's exit status; null while running", default=None)
    command_line: list[str] = described("argv, with the API key replaced by `***`")


@dataclass(kw_only=True)
class DatasetInfo:
    """Which prompts were used."""

    name: str = described("'builtin' or the file path as given")
    prompts: int = described("number of prompts")
    sha256: str = described("of the file bytes")
    categories: dict[str, int] = described("prompts per category", default_factory=dict)


@dataclass(kw_only=True)
class Settings:
    """What was measured (the command-line settings after defaults). Runs compare only when these match."""

    base_url: str | None = described("server root", default=None)
    model: str | None = described("model requested (discovered from /v1/models when not given)", default=None)
    sessions: list[int] = described("concurrency levels, in order", default_factory=list)
    turns_per_session: int | None = described("turns per conversation", default=None)
    max_tokens: int | None = described("max_tokens per reply", default=None)
    temperature: float | None = described("sampling temperature (always sent)", default=None)
    ignore_eos: bool | None = described("vLLM's ignore_eos sent", default=None)
    stream: bool | None = described("streaming requests", default=None)
    independent_turns: bool | None = described("turns sent without the conversation so far", default=None)
    prompt_order: PromptOrder | None = described("how sessions draw prompts", default=None)
    dataset: DatasetInfo | None = described("the prompt set", default=None)
    system_prompt: str | None = described("system message opening every conversation", default=None)
    warmup: int | None = described("warmup requests", default=None)
    repeats: int | None = described("measured repeats per level", default=None)
    seed: int | None = described("prompt selection seed", default=None)
    timeout_s: float | None = described("per-request timeout", default=None)
    metrics_url: str | None = described("Prometheus endpoint; null when disabled", default=None)
    api_key_set: bool | None = described("an API key was sent (the key itself is never stored)", default=None)


@dataclass(kw_only=True)
class ServerInfo:
    """What the server said about itself at the start."""

    base_url: str | None = described("server root", default=None)
    models: list[dict[str, Any]] = described("/v1/models entries as served", default_factory=list)
    version: str | None = described("/version", default=None)
    version_error: str | None = described("why /version could not be read", default=None, omit_if_none=True)
    metrics_url: str | None = described("Prometheus endpoint", default=None)
    cache_config: dict[str, str] | None = described("labels of vllm:cache_config_info", default=None)
    spec_decode_counters: bool | None = described("the server exports spec-decode counters", default=None)
    metrics_error: str | None = described("why /metrics could not be read", default=None, omit_if_none=True)
    notes: list[str] | None = described("warnings about the server (e.g. prefix caching on)", default=None,
                                        omit_if_none=True)  # fmt: skip


@dataclass(kw_only=True)
class WarmupSummary:
    """Requests sent before the first level (not measured)."""

    requests: int = described("warmup requests sent", default=0)
    completed: int = described("successful warmup requests", default=0)
    failures: dict[str, int] = described("failed warmup requests by reason", default_factory=dict)
    failure_examples: dict[str, str] = described("first detail for each reason", default_factory=dict)
    duration_s: float = described("wall time of the warmup", default=0.0)


@dataclass(kw_only=True)
class BenchmarkResult:
    """A benchmark result file: one run of payload/benchmark_multi_turn.py, one object per concurrency level."""

    schema: Literal["kimi-dflash/benchmark-result"] = described("always kimi-dflash/benchmark-result")
    schema_version: int = described("bumped when a field is renamed, removed or changes meaning")
    tool: ToolInfo = described("what produced the file")
    run: RunInfo = described("when and how the run went")
    settings: Settings = described("what was measured")
    server: ServerInfo | None = described("what the server said about itself; null before it was reached")
    warmup: WarmupSummary | None = described("the warmup; null before it ran", default=None)
    results: list[LevelResult] = described("one object per concurrency level, in the order measured")

    @property
    def levels(self) -> dict[int, LevelResult]:
        """Results by session count (the last one wins if a level was measured twice)."""
        return {level.sessions: level for level in self.results}

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def new_result(
    tool: ToolInfo,
    run: RunInfo,
    settings: Settings,
    server: ServerInfo | None,
    warmup: WarmupSummary | None,
    results: list[LevelResult],
) -> BenchmarkResult:
    return BenchmarkResult(
        schema=SCHEMA,
        schema_version=SCHEMA_VERSION,
        tool=tool,
        run=run,
        settings=settings,
        server=server,
        warmup=warmup,
        results=results,
    )


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
    try:
        return from_json(BenchmarkResult, document)
    except SchemaError as exc:
        shown = "; ".join(exc.problems[:5]) + (f" (and {len(exc.problems) - 5} more)" if len(exc.problems) > 5 else "")
        raise UserError(f"{source}: not a valid result file: {shown}.") from None


def load_result(path: Path | str) -> BenchmarkResult:
    """Read a result file (see ``parse_result``)."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such result file.") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror}).") from None
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc}).") from None
    return parse_result(document, str(path))


def validate_document(document: Any) -> list[str]:
    """Problems with a result document as JSON data, each named by its JSON path (empty list: valid)."""
    problem = version_problem(document, "document")
    if problem is not None:
        return [problem]
    try:
        from_json(BenchmarkResult, document)
    except SchemaError as exc:
        return exc.problems
    return []
