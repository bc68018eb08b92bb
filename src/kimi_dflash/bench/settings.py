"""The benchmark's settings, declared once: its command line, the run's configuration and the result's `settings`."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Literal

from kimi_dflash.bench import datasets, request_shaping
from kimi_dflash.bench.arrivals import ArrivalName, ArrivalProcess, ThinkTime, ThinkTimeDist, parse_rates
from kimi_dflash.bench.datasets import DatasetInfo
from kimi_dflash.bench.intervals import CONFIDENCE_LEVELS
from kimi_dflash.bench.workload import BUILTIN, Dataset, load_dataset, unencodable_at
from kimi_dflash.core import options, redaction
from kimi_dflash.core.options import DEFAULT_PORT, MAX_TOKENS, doc

DEFAULT_BASE_URL = f"http://127.0.0.1:{DEFAULT_PORT}"  # what ./serve.sh starts by default
DEFAULT_SESSIONS = 8
DEFAULT_OPEN_SESSIONS = 100
MAX_PLANNED_HOURS = 24  # of an open loop's own waits: beyond it a rate or think time is a typo, not a measurement
DEFAULT_INTERVAL_S = 10.0  # --progress-interval
MAX_WARMUP = 10_000  # the warmup's requests are drawn at once; more than this is a run of its own, not a warmup


server_option, load_option, output_option, analysis_option = (
    functools.partial(options.option, group=name) for name in ("server", "load", "output", "analysis")
)
OPEN_LOOP = "open-loop load (instead of --sessions)"
open_loop_option = functools.partial(options.option, group=OPEN_LOOP)


def normalize_base_url(url: str) -> str:
    """Accept ``http://host:port``, ``.../`` or ``.../v1``; return the server root without a slash."""
    return url.strip().rstrip("/").removesuffix("/v1")


def parse_slo(text: str) -> dict[str, float]:
    from kimi_dflash.bench.goodput import parse_slo  # goodput reads the result model, which reads this module

    return parse_slo(text)


@dataclass(kw_only=True)
class OpenLoopSettings:
    """Open-loop load (--request-rate): conversation starts follow an arrival process."""

    request_rates: list[float | None] = doc("rate levels, conversations/s; null: all at once")
    arrival: ArrivalName = doc("poisson | constant | gamma")
    burstiness: float = doc("gamma shape B")
    max_concurrency: int | None = doc("cap on requests in flight; null: none")
    sessions_per_level: int = doc("conversations started per rate level and repeat")
    think_time_s: float = doc("mean pause between a reply and the next turn")
    think_time_dist: ThinkTimeDist = doc("fixed | exp | uniform (0 .. 2 x mean)")

    @property
    def think(self) -> ThinkTime:
        return ThinkTime(self.think_time_s, self.think_time_dist)

    def process(self, rate: float) -> ArrivalProcess:
        return ArrivalProcess(rate=rate, process=self.arrival, burstiness=self.burstiness)


@dataclass(kw_only=True)
class Settings:
    """What was measured (the command-line settings after defaults). Runs compare only when these match."""

    GROUPS: ClassVar[dict[str, str]] = {  # the groups' descriptions in --help (a group is where a field says)
        OPEN_LOOP: "Conversations start on an arrival process's clock, whatever the server does; each following turn "
        "is sent when the previous reply finished plus a think time. One level per rate."
    }

    base_url: str | None = server_option(
        "server root, with or without /v1 (default %(default)s: where ./serve.sh listens)",
        record="server root",
        default=DEFAULT_BASE_URL,
        parse=options.http_url,
    )
    model: str | None = server_option(
        record="model to request (default: the one /v1/models lists; required when it lists several)"
    )
    sessions: list[int] = load_option(
        f"concurrent sessions; a comma list sweeps levels, e.g. 8,16,32 (default {DEFAULT_SESSIONS})",
        record="concurrency levels, in order",
        field_default=[],
        parse=options.comma_list(int, "positive integers", 1),
    )
    turns_per_session: int | None = load_option(record="turns per conversation", default=5, minimum=1)
    max_tokens: int | None = load_option(record="max_tokens per reply", default=512, minimum=1, maximum=MAX_TOKENS)
    temperature: float | None = load_option(record="sampling temperature (always sent)", default=0.0, minimum=0)
    ignore_eos: bool | None = load_option(record="send ignore_eos: every reply runs to --max-tokens")
    stream: bool | None = load_option(
        "non-streaming requests (no TTFT/TPOT; E2EL and tok/s only)",
        record="streaming requests",
        default=True,
        flag="--no-stream",
    )
    independent_turns: bool | None = load_option(
        record="send every turn without the conversation so far: the closed-loop load of `vllm bench serve "
        "--max-concurrency N`, for cross-checking against it"
    )
    prompt_order: Literal["random", "sequential"] | None = load_option(
        record="random: each session draws its prompts by --seed; sequential: turn t of session s sends prompt "
        "(t x sessions + s) of the dataset, in file order (what `vllm bench serve --disable-shuffle` does)",
        default="random",
    )
    dataset_name: str = load_option(
        """'builtin' (225 prompts shipped with the tool) or a JSONL file of {"prompt": ...} lines""",
        flag="--dataset",
        default=BUILTIN,
    )
    dataset_format: str | None = load_option(
        'format of --dataset (default: detected from its first record): prompts ({"prompt": ...}), openai-messages '
        '({"messages": [...]}), sharegpt ({"conversations": [...]}), speed-bench ({"category": ..., "turns": [...]}); '
        "conversations replay their user turns, the server generates the replies",
        choices=datasets.FORMATS,
    )
    dataset: DatasetInfo | None = doc("the prompt set", default=None)  # derived fields: filled by resolve()
    system_prompt: str | None = load_option(record="system message opening every conversation")
    warmup: int | None = load_option(
        record="warmup requests before measuring (default: the first level's session count)",
        minimum=0,
        maximum=MAX_WARMUP,
    )
    repeats: int | None = load_option(record="measured repeats per level, fresh prompts each", default=1, minimum=1)
    seed: int | None = load_option(record="prompt selection seed; same seed = same conversations", default=0)
    timeout_s: float | None = server_option(
        record="per-request timeout, seconds", flag="--timeout", default=600.0, minimum=0.001
    )
    metrics_url: str | None = server_option(
        record="Prometheus endpoint for spec-decode counters (default: <base-url>/metrics; 'none' disables them: null)",
        parse=lambda text: text if text.lower() == "none" else options.http_url(text),
    )
    api_key: str | None = server_option(
        "bearer token (default: $OPENAI_API_KEY, then $VLLM_API_KEY); never printed or stored", secret=True
    )
    api_key_set: bool | None = doc("an API key was sent (the key itself is never stored)", default=None)
    request_rate: tuple[float, ...] | None = open_loop_option(
        "conversation starts per second (= requests/s with --turns-per-session 1); a comma list sweeps, e.g. 1,2,4; "
        "inf starts every conversation at once. Turns it into an open loop. The run's own waits ((conversations - 1) "
        f"/ rate + think time x (turns - 1), per rate and repeat) may add up to at most {MAX_PLANNED_HOURS} h",
        parse=parse_rates,
        metavar="RATES",
    )
    arrival: ArrivalName = open_loop_option(
        "arrival process of conversation starts (default poisson)", default="poisson"
    )
    burstiness: float = open_loop_option(
        "gamma shape B for --arrival gamma: 1 = poisson, < 1 burstier, > 1 smoother (default 1)", default=1.0, above=0
    )
    max_concurrency: int | None = open_loop_option(
        "cap on requests in flight; arrivals beyond it wait (the wait is reported as local queueing)", minimum=1
    )
    num_sessions: int | None = open_loop_option(
        f"conversations started per rate level and repeat (default {DEFAULT_OPEN_SESSIONS})", minimum=1
    )
    think_time: float = open_loop_option(
        "mean pause between a reply and the conversation's next turn (default 0; counts toward the "
        f"{MAX_PLANNED_HOURS} h a run may plan, see --request-rate)",
        default=0.0,
        minimum=0,
        metavar="SECONDS",
    )
    think_time_dist: ThinkTimeDist = open_loop_option(
        "fixed (exactly --think-time), exp (exponential) or uniform (0 .. 2x); default fixed", default="fixed"
    )
    open_loop: OpenLoopSettings | None = doc("open-loop load; absent: closed loop (--sessions)", omit_if_none=True)
    slo: dict[str, float] | None = analysis_option(
        "service-level objectives, e.g. ttft:500ms,tpot:50ms,e2el:10s,user_tps:20 (ttft/tpot/e2el are maxima and "
        "need their unit, ms or s; user_tps = 1/TPOT is a minimum in tok/s; each at most once). Adds attainment and "
        "goodput per level",
        record="--slo limits",
        omit_if_none=True,
        parse=parse_slo,
        metavar="SPEC",
    )
    percentiles: tuple[float, ...] | None = analysis_option(
        "percentiles to report for TTFT, TPOT, E2EL, per-user tok/s and chunk gaps, e.g. 50,90,99,99.9 (stored under "
        "each distribution's 'percentiles'; the fixed p50/p90/p95/p99 stay)",
        record="--percentiles",
        omit_if_none=True,
        parse=options.comma_list(float, "percentiles from 0 to 100 (e.g. 50,90,99,99.9)", 0, 100),
        metavar="LIST",
    )
    confidence: float = analysis_option(
        "confidence level of the intervals over repeats (--repeats >= 2; default 0.95)",
        choices=CONFIDENCE_LEVELS,
        default=0.95,
    )
    csv: bool = analysis_option(
        "also write OUTPUT.requests.csv (one row per request) and OUTPUT.levels.csv (one row per level) beside the JSON"
    )
    endpoint: Literal["chat", "completions"] | None = server_option(
        record="chat: /v1/chat/completions with the conversation; completions: /v1/completions with each turn's "
        "text as the prompt, as given (no chat template, no history: turns are independent)",
        omit_if_none=True,
        default="chat",
    )
    extra_body_text: str | None = server_option(
        """JSON object (or @FILE) merged into every request body, e.g. '{"chat_template_kwargs": {"thinking": """
        """false}, "top_p": 0.95}'; stored in the result""",
        flag="--extra-body",
        metavar="JSON",
    )
    extra_body: dict[str, Any] | None = doc("--extra-body: fields merged into every request body", omit_if_none=True)
    shared_prefix_tokens: int | None = load_option(
        record="open every conversation with the same system text of about N tokens (estimated at 4 characters per "
        "token, no tokenizer; usage.prompt_tokens shows the real count); 0: none",
        omit_if_none=True,
        default=0,
        minimum=0,
        maximum=MAX_TOKENS,
        metavar="N",
    )
    header: list[str] = server_option(
        "extra HTTP header on every request (repeatable); the value of a credential-like header (Authorization, "
        "Cookie, *key*, *token*, *secret*, *auth*) is never printed or stored",
        repeatable=True,
        metavar="NAME:VALUE",
    )
    headers: list[str] | None = doc(
        "--header lines sent with every request (credential values stored as ***)", omit_if_none=True
    )
    output: str | None = output_option(
        "result JSON (default results/benchmark-<UTC time>.json); written atomically after every level. An existing "
        "result is kept until this run has measured a level (until then: OUTPUT.partial), then moved to "
        "<name>.previous.json; a FIFO, device or symbolic link is refused (/dev/null: keep nothing)"
    )
    label: str | None = output_option("free text stored in the result, e.g. dflash-st2 or baseline")
    record_requests: bool = output_option("also store every request's raw timestamps in the result")
    progress_interval: float = output_option(
        "during a level, print requests done / total, tok/s so far and time elapsed to stderr this often (default "
        "%(default)s; 0 turns it off)",
        default=DEFAULT_INTERVAL_S,
        minimum=0,
        metavar="SECONDS",
    )
    no_uvloop: bool = output_option("use asyncio's loop even if uvloop is installed")
    command_line: list[str] = output_option(argv=True)

    # -- after parsing -------------------------------------------------------------------------------------
    def check(self) -> None:
        """Refuse what cannot work, naming the fix (a usage error: exit 2, before anything is sent)."""
        open_loop = self.request_rate is not None
        for f, spec in options.fields_of(Settings):
            value, flag = getattr(self, f.name), options.flag_of(f, spec)
            for text in value if isinstance(value, list | tuple) and not spec.argv else (value,):
                if isinstance(text, str) and (at := unencodable_at(text)) is not None:
                    raise ValueError(f"{flag} holds bytes that are not UTF-8 (at character {at}); pass UTF-8 text")
            if spec.group == OPEN_LOOP and not open_loop and value != spec.default:
                raise ValueError(f"{flag} belongs to the open loop: add --request-rate (e.g. --request-rate 2)")
        if open_loop and self.sessions is not None:
            raise ValueError("--sessions (closed loop) and --request-rate (open loop) exclude each other; give one")
        if self.burstiness != 1.0 and self.arrival != "gamma":
            raise ValueError("--burstiness shapes --arrival gamma only; add --arrival gamma")
        planned_s = self.planned_waits_s()
        if planned_s > MAX_PLANNED_HOURS * 3600:
            raise ValueError(
                f"this open loop would wait about {planned_s / 3600:.3g} h by its own schedule (per rate and repeat: "
                f"{self.num_sessions or DEFAULT_OPEN_SESSIONS} conversations arriving at the rate + --think-time x "
                f"{(self.turns_per_session or 1) - 1} later turns), more than the {MAX_PLANNED_HOURS} h a run may "
                "plan. Raise --request-rate, or lower --num-sessions, --think-time, --turns-per-session or --repeats"
            )
        if self.slo and not self.stream and set(self.slo) & {"ttft_ms", "tpot_ms", "user_tok_s"}:
            raise ValueError("--no-stream has no TTFT/TPOT: an --slo on ttft, tpot or user_tps needs streaming")
        if self.endpoint == "completions" and (self.system_prompt or self.shared_prefix_tokens):
            raise ValueError(
                "--system-prompt and --shared-prefix-tokens need --endpoint chat "
                "(completions send the turn's text as the prompt)"
            )

    def planned_waits_s(self) -> float:
        """Seconds an open-loop run spends in its own arrival and think-time waits, whatever the server does."""
        if self.request_rate is None:
            return 0.0
        sessions = self.num_sessions or DEFAULT_OPEN_SESSIONS
        think_s = self.think_time * ((self.turns_per_session or 1) - 1)
        waits = sum((0.0 if math.isinf(rate) else (sessions - 1) / rate) + think_s for rate in self.request_rate)
        return (self.repeats or 1) * waits

    def resolve(self) -> None:
        """The defaults that depend on other options, then the derived fields. Reads the dataset (UserError)."""
        if self.request_rate is not None:
            self.sessions = []  # recorded: no session levels; the warmup still uses levels[0]
            self.open_loop = OpenLoopSettings(
                request_rates=[None if math.isinf(rate) else rate for rate in self.request_rate],
                arrival=self.arrival,
                burstiness=self.burstiness,
                max_concurrency=self.max_concurrency,
                sessions_per_level=self.num_sessions or DEFAULT_OPEN_SESSIONS,
                think_time_s=self.think_time,
                think_time_dist=self.think_time_dist,
            )
        else:
            self.sessions = list(self.sessions or (DEFAULT_SESSIONS,))
        self.api_key = self.api_key or os.environ.get("OPENAI_API_KEY") or os.environ.get("VLLM_API_KEY") or None
        if self.metrics_url is None:
            self.metrics_url = f"{normalize_base_url(self.base_url or DEFAULT_BASE_URL)}/metrics"
        elif self.metrics_url.lower() == "none":
            self.metrics_url = None
        if self.endpoint == "completions":
            self.independent_turns = True  # a completion carries no conversation: say so in the result
        if self.warmup is None:
            self.warmup = self.levels[0]
        self.shared_prefix_tokens = self.shared_prefix_tokens or None
        self.dataset, self.api_key_set = self.prompts.describe(), bool(self.api_key)
        self.extra_body = request_shaping.parse_extra_body(self.extra_body_text) if self.extra_body_text else None
        self.headers = [request_shaping.shown_header(name, value) for name, value in self.header_pairs] or None

    def recorded(self, model: str | None) -> Settings:
        """As the result file keeps them: the model the server served, the metrics URL's secrets masked."""
        shown = redaction.redact_query(self.metrics_url) if self.metrics_url else None
        return dataclasses.replace(self, model=model or self.model, metrics_url=shown)

    # -- what the run reads ----------------------------------------------------------------------------------
    @property
    def levels(self) -> tuple[int, ...]:
        """The session counts measured; an open loop warms up as its first min(8, conversations)."""
        if self.sessions:
            return tuple(self.sessions)
        return (min(DEFAULT_SESSIONS, self.num_sessions or DEFAULT_OPEN_SESSIONS),)

    @cached_property
    def header_pairs(self) -> list[tuple[str, str]]:
        return [request_shaping.parse_header(text) for text in self.header]

    @cached_property
    def prompts(self) -> Dataset:
        return load_dataset(self.dataset_name, self.dataset_format)

    @cached_property
    def system_text(self) -> str | None:
        """--system-prompt, after the shared prefix when --shared-prefix-tokens asks for one."""
        if not self.shared_prefix_tokens:
            return self.system_prompt
        vocabulary = [w for p in self.prompts.prompts for w in p.text.split()] or ["token"]
        prefix = datasets.shared_prefix(self.shared_prefix_tokens, self.seed or 0, vocabulary)
        return prefix + ("\n\n" + self.system_prompt if self.system_prompt else "")
