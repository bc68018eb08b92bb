"""Warmup, then each level, repeated; a stop keeps what finished as a partial level (docs/benchmark.md, "Workload")."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from kimi_dflash.bench import client, failure_hints, goodput, http1, metrics, prometheus, server_info, spec_summary
from kimi_dflash.bench.arrivals import level_rng
from kimi_dflash.bench.records import CANCELLED, CLIENT_OUT_OF_RESOURCES, CONNECTION_FAILURES, TIMEOUT, RequestRecord
from kimi_dflash.bench.report import progress_line
from kimi_dflash.bench.result import (
    LevelResult,
    RequestRecords,
    ServerInfo,
    SpecDecode,
    SpecDecodeStatus,
    WarmupSummary,
)
from kimi_dflash.bench.settings import DEFAULT_BASE_URL, Settings, normalize_base_url
from kimi_dflash.bench.workload import Prompt, session_prompts, warmup_prompts
from kimi_dflash.core.errors import UserError

perf_counter = time.perf_counter

SETTLE_POLL_S = 0.25  # after the window, until the spec-decode counters stop moving (they trail the last token)
SETTLE_MAX_S = 3.0

EXIT_ABORTED = 3
EXIT_CLIENT_SHORT = 5  # this machine ran out of descriptors, ports or memory mid-run (bench/descriptors.py)

PROBE_INTERVAL_S = 1.0  # at most one liveness probe per second, however many sessions fail together
PRECONNECT_MAX = 64  # connections an open loop without a cap opens before the window


@dataclass
class Stopper:
    """Set once, by a signal handler or by the run itself; the first reason wins."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    status: str = "complete"
    detail: str = ""
    exit_code: int = 0
    stopped_at: float | None = None

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def trigger(self, status: str, detail: str, exit_code: int) -> None:
        if self.event.is_set():
            return
        self.status, self.detail, self.exit_code = status, detail, exit_code
        self.stopped_at = perf_counter()
        self.event.set()


@dataclass
class RunState:
    """What has been learned so far; the CLI writes it out after every step."""

    model: str | None = None
    server: ServerInfo | None = None
    warmup: WarmupSummary | None = None
    results: list[LevelResult] = field(default_factory=list)
    origin: float = field(default_factory=perf_counter)
    level_records: list[list[RequestRecord]] = field(default_factory=list)  # only with --csv


class ConnectionPool:
    """Keep-alive connections, each used by one request at a time, so an in-flight request has its own."""

    def __init__(self, endpoint: client.Endpoint) -> None:
        self.endpoint = endpoint
        self.idle: list[http1.Connection] = []
        self.every: list[http1.Connection] = []

    async def preconnect(self, count: int) -> None:
        """Connect before the window opens, so TTFT never includes TCP setup (a failure shows on the first request)."""
        fresh = [self.endpoint.connection() for _ in range(count)]
        await asyncio.gather(*(c.connect() for c in fresh), return_exceptions=True)
        self.every.extend(fresh)
        self.idle.extend(fresh)

    def take(self) -> http1.Connection:
        if self.idle:
            return self.idle.pop()
        conn = self.endpoint.connection()
        self.every.append(conn)
        return conn

    def close(self) -> None:
        for conn in self.every:
            conn.close()


async def _cancel(tasks: list[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _sleep_until(when: float) -> None:
    # The loop may fire a timer up to its clock resolution early (uvloop: 1 ms); never send before the time.
    while (delay := when - perf_counter()) > 0:
        await asyncio.sleep(delay)


class Benchmark:
    def __init__(self, cfg: Settings, stopper: Stopper, checkpoint: Callable[[RunState], None]) -> None:
        self.cfg = cfg  # resolved (Settings.resolve)
        self.endpoint = client.Endpoint(
            base_url=normalize_base_url(cfg.base_url or DEFAULT_BASE_URL),
            api_key=cfg.api_key,
            timeout_s=cfg.timeout_s or 600.0,
            api=cfg.endpoint or "chat",
            extra_headers=tuple(cfg.header_pairs),
        )
        self.stopper = stopper
        self.checkpoint = checkpoint
        self.state = RunState()
        self._probe_lock = asyncio.Lock()
        self._last_probe_ok = -1e9

    async def run(self) -> RunState:
        cfg = self.cfg
        # aiohttp serves only the GET endpoints (a handful per run); requests use the benchmark's own connections.
        timeout = aiohttp.ClientTimeout(total=self.endpoint.timeout_s, sock_connect=min(self.endpoint.timeout_s, 30.0))
        async with aiohttp.ClientSession(timeout=timeout, headers=dict(self.endpoint.extra_headers)) as session:
            server, model = await server_info.probe(session, self.endpoint, cfg.model, cfg.metrics_url)
            self.state.server, self.state.model = server, model
            notes = server_notes(server, model, cfg)
            if notes:
                server.notes = notes
                for note in notes:
                    print(f"WARNING: {note}", file=sys.stderr)
            self.checkpoint(self.state)
            self.state.warmup = await self._warmup()
            self.checkpoint(self.state)
            for level in cfg.request_rate or cfg.levels:  # an open loop's rates (inf: all at once), or sessions
                if self.stopper.stopped:
                    break
                self.state.results.append(await self._level(session, level))
                self.checkpoint(self.state)
        return self.state

    async def _warmup(self) -> WarmupSummary:
        cfg = self.cfg
        if cfg.warmup <= 0:
            return WarmupSummary(requests=0)
        queue: asyncio.Queue[tuple[int, Prompt]] = asyncio.Queue()
        for item in enumerate(warmup_prompts(cfg.prompts, cfg.seed, cfg.warmup)):
            queue.put_nowait(item)
        records: list[RequestRecord] = []

        async def worker() -> None:
            conn = self.endpoint.connection()
            try:
                while not queue.empty():
                    i, prompt = queue.get_nowait()
                    record = RequestRecord(sessions=0, repeat=0, session=i, turn=1, warmup=True)
                    records.append(record)
                    await client.send(conn, self.endpoint, self.body([_user(prompt)]), cfg.stream, record)
                    if record.error == CLIENT_OUT_OF_RESOURCES:
                        self._client_short(record)
            finally:
                conn.close()

        started = perf_counter()
        workers = [asyncio.create_task(worker()) for _ in range(min(cfg.warmup, cfg.levels[0]))]
        await self._until_done_or_stopped(workers)
        failures, examples = metrics.count_failures(records)
        summary = WarmupSummary(
            requests=len(records),
            completed=sum(1 for r in records if r.ok),
            failures=failures,
            failure_examples=examples,
            duration_s=perf_counter() - started,
        )
        if not self.stopper.stopped and summary.completed == 0:
            raise UserError(failure_hints.warmup_failed(len(records), failures, examples, self.state.model))
        return summary

    async def _level(self, session: aiohttp.ClientSession, level: float) -> LevelResult:
        """One level: ``level`` sessions (closed loop) or, with ``cfg.open_loop``, a request rate."""
        cfg, ol = self.cfg, self.cfg.open_loop
        before, scrape_error = await self._scrape(session)
        records: list[RequestRecord] = []
        windows: list[metrics.Window] = []
        for repeat in range(cfg.repeats):
            if self.stopper.stopped:
                break
            windows.append(await Repeat(self, level, repeat, records).measure())
        partial = self.stopper.stopped
        spec, status = await self._spec_window(session, before, scrape_error)
        sessions = int(level) if ol is None else ol.sessions_per_level
        result = metrics.level_result(
            sessions, cfg.turns_per_session, records, windows, spec, status, partial, percentiles=cfg.percentiles or ()
        )
        if ol is not None:
            result.open_loop = metrics.open_loop_level(records, windows, level, ol)
        result.intervals = metrics.repeat_intervals(result.repeat_results, cfg.confidence)
        if cfg.slo:
            result.goodput = goodput.goodput(records, result.duration_s, cfg.slo)
        result.spec_per_request = spec_summary.spec_per_request(records)
        result.reply_hashes = spec_summary.reply_hashes(records) or None
        if cfg.csv:
            self.state.level_records.append(records)
        if cfg.record_requests:
            result.request_records = RequestRecords(
                clock_origin=self.state.origin, records=[r.relative_to(self.state.origin) for r in records]
            )
        return result

    async def _scrape(self, session: aiohttp.ClientSession) -> tuple[prometheus.SpecCounters | None, str | None]:
        api_key, model = self.endpoint.api_key, self.state.model or ""
        return await server_info.scrape_spec(session, self.cfg.metrics_url, api_key, model)

    async def _spec_window(
        self, session: aiohttp.ClientSession, before: prometheus.SpecCounters | None, scrape_error: str | None
    ) -> tuple[SpecDecode | None, SpecDecodeStatus]:
        if scrape_error is not None:
            return None, "unavailable"
        if before is None:
            return None, "absent"
        after, error = await self._scrape(session)
        waited = 0.0
        while error is None and after is not None and waited < SETTLE_MAX_S:
            await asyncio.sleep(SETTLE_POLL_S)
            waited += SETTLE_POLL_S
            again, error = await self._scrape(session)
            if again == after:
                break
            after = again
        if error is not None:
            return None, "unavailable"
        return prometheus.spec_delta(before, after)

    async def after_failure(self, record: RequestRecord) -> None:
        """A local shortage stops the run (every request would fail alike); a connection failure probes the server."""
        if record.error == CLIENT_OUT_OF_RESOURCES:
            self._client_short(record)
        elif record.error in CONNECTION_FAILURES:
            await self._confirm_server_down(record)

    def _client_short(self, record: RequestRecord) -> None:
        self.stopper.trigger(
            "failed",
            f"the client ran out of a local resource ({record.error_detail}); the server is not to blame. Raise "
            "the open-file limit (ulimit -n), free local ports, or run fewer sessions; levels finished before "
            "this one are complete in the result",
            EXIT_CLIENT_SHORT,
        )

    async def _confirm_server_down(self, record: RequestRecord) -> None:
        """A connection failed: if a probe on a fresh connection cannot reach the server, abort the run."""
        async with self._probe_lock:
            if self.stopper.stopped or perf_counter() - self._last_probe_ok < PROBE_INTERVAL_S:
                return
            # Its own connection: the pool may still hold connections to a server that is gone.
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True), headers=dict(self.endpoint.extra_headers)
            ) as fresh:
                try:
                    await client.get_json(fresh, f"{self.endpoint.base_url}/v1/models", self.endpoint.api_key, 5.0)
                    self._last_probe_ok = perf_counter()
                    return
                except Exception as exc:  # noqa: BLE001
                    reason, detail = client.classify_exception(exc)
            if reason in CONNECTION_FAILURES or reason == TIMEOUT:
                why = f"server stopped answering ({record.error}: {record.error_detail}; probe: {detail})"
                self.stopper.trigger("aborted", why, EXIT_ABORTED)

    async def _until_done_or_stopped(self, tasks: list[asyncio.Task[None]]) -> None:
        if not tasks:
            return
        everything = asyncio.gather(*tasks)
        stop = asyncio.ensure_future(self.stopper.event.wait())
        try:
            await asyncio.wait({everything, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if everything.done():
            everything.result()  # re-raise a bug in a session rather than hide it
            return
        await _cancel([*tasks, everything])

    def body(self, messages: list[dict[str, str]]) -> bytes:
        cfg = self.cfg
        # completions: the turn's text is the prompt (no template, no history)
        content = {"prompt": messages[-1]["content"]} if self.endpoint.api == "completions" else {"messages": messages}
        return client.request_payload(
            self.state.model or "", content, cfg.max_tokens, cfg.temperature, cfg.stream, cfg.ignore_eos, cfg.extra_body
        )


class Repeat:
    """One measured repeat of a level: its conversations, their start times, their connections, its window."""

    def __init__(self, bench: Benchmark, level: float, repeat: int, sink: list[RequestRecord]) -> None:
        cfg, ol = bench.cfg, bench.cfg.open_loop
        self.bench, self.level, self.repeat, self.sink, self.ol = bench, level, repeat, sink, ol
        self.sessions = int(level) if ol is None else ol.sessions_per_level
        self.plans = [
            session_prompts(cfg.prompts, cfg.seed, self.sessions, repeat, s, cfg.turns_per_session, cfg.prompt_order)
            for s in range(self.sessions)
        ]
        self.pool = ConnectionPool(bench.endpoint)
        self.cap = asyncio.Semaphore(ol.max_concurrency) if ol is not None and ol.max_concurrency else None
        if ol is None:  # a closed loop: every conversation at once, each with its connection
            self.offsets: Any = [0.0] * self.sessions
            self.label = f"[{self.sessions} sessions] repeat {repeat + 1}/{cfg.repeats}"
            self.connections, what = self.sessions, f"{self.sessions} sessions"
        else:
            self.offsets = ol.process(level).offsets(self.sessions, level_rng(cfg.seed, level, repeat, 0))
            shown = "all at once" if math.isinf(level) else f"{level:g} conversations/s ({ol.arrival})"
            self.label = f"[rate {shown}] repeat {repeat + 1}/{cfg.repeats}"
            self.connections = min(self.sessions, ol.max_concurrency or PRECONNECT_MAX)
            what = f"{self.sessions} conversations"
        self.announce = f"{self.label}: measuring {what} x {cfg.turns_per_session} turns"

    async def measure(self) -> metrics.Window:
        """Connect, then run the conversations inside a timed window (its wall and CPU time)."""
        bench = self.bench
        await self.pool.preconnect(self.connections)
        print(self.announce, file=sys.stderr, flush=True)
        first, cpu0, start = len(self.sink), time.process_time(), perf_counter()
        progress = asyncio.create_task(self._progress(first, start))
        try:
            await bench._until_done_or_stopped([asyncio.create_task(self._run(start))])
        finally:
            progress.cancel()
            self.pool.close()  # again: a stop may cancel _run before it started
        stopper = bench.stopper
        end = stopper.stopped_at if stopper.stopped and stopper.stopped_at else perf_counter()
        return metrics.Window(self.repeat, duration_s=max(end - start, 0.0), cpu_s=time.process_time() - cpu0)

    async def _progress(self, first: int, start: float) -> None:
        """Every --progress-interval until cancelled: requests done of this repeat's (``sink[first:]``) and tok/s."""
        total, interval = self.sessions * self.bench.cfg.turns_per_session, self.bench.cfg.progress_interval
        while interval > 0:
            await asyncio.sleep(interval)
            line = progress_line(self.label, self.sink[first:], total, perf_counter() - start)
            print(line, file=sys.stderr, flush=True)

    async def _run(self, start: float) -> None:
        """Start each conversation at its offset from ``start``, whatever the others are doing."""
        tasks: list[asyncio.Task[None]] = []
        try:
            for index, offset in enumerate(self.offsets):
                when = start + float(offset)
                await _sleep_until(when)
                if self.bench.stopper.stopped:
                    break
                tasks.append(asyncio.create_task(self._conversation(index, when)))
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            await _cancel(tasks)
            raise
        finally:
            self.pool.close()  # here, so the sockets are released while the window's tasks wind down

    async def _conversation(self, index: int, scheduled: float) -> None:
        bench, cfg, ol = self.bench, self.bench.cfg, self.ol
        think_rng = level_rng(cfg.seed, self.level, self.repeat, 1 + index) if ol is not None else None
        history: list[dict[str, str]] = []
        for slot, prompt in enumerate(self.plans[index], start=1):
            await _sleep_until(scheduled)
            if bench.stopper.stopped:
                return
            # Conversation datasets: turn 1 of a conversation starts a fresh history (with its own system prompt).
            if slot == 1 or prompt.conversation_turn == 1:
                history = _opening(cfg.system_text, prompt.system)
            messages = [*history, _user(prompt)]
            record = RequestRecord(
                sessions=self.sessions,
                repeat=self.repeat,
                session=index,
                turn=prompt.conversation_turn or slot,
                category=prompt.category,
                prompt_id=prompt.id,
            )
            if ol is not None:
                record.scheduled_time = scheduled
            reply = await self._request(record, messages)
            if record.ok and reply is not None and not cfg.independent_turns:
                # Kimi may spend the whole budget reasoning; carry that text so the history still grows.
                history = [*messages, {"role": "assistant", "content": reply.content or reply.reasoning}]
            elif record.error is not None:
                await bench.after_failure(record)
            scheduled = record.done_time
            if ol is not None and think_rng is not None:
                scheduled += ol.think.draw(think_rng)

    async def _request(self, record: RequestRecord, messages: list[dict[str, str]]) -> Any:
        open_loop, cap = self.ol is not None, self.cap
        if open_loop:
            record.dispatch_time = perf_counter()
        self.sink.append(record)  # before waiting or sending: a cancelled request still leaves its record
        if cap is not None:
            try:
                await cap.acquire()
            except asyncio.CancelledError:
                record.error, record.done_time = CANCELLED, perf_counter()
                raise
        try:
            if open_loop:
                record.admitted_time = perf_counter()
            conn = self.pool.take()
            try:
                bench = self.bench
                return await client.send(conn, bench.endpoint, bench.body(messages), bench.cfg.stream, record)
            finally:
                self.pool.idle.append(conn)
        finally:
            if cap is not None:
                cap.release()


def _user(prompt: Prompt) -> dict[str, str]:
    return {"role": "user", "content": prompt.text}


def _opening(shared: str | None, own: str | None) -> list[dict[str, str]]:
    """--system-prompt (with the shared prefix), then the conversation's own system prompt."""
    text = "\n\n".join(part for part in (shared, own) if part)
    return [{"role": "system", "content": text}] if text else []


def server_notes(server: ServerInfo, model: str, cfg: Settings) -> list[str]:
    """Warnings about the server that the result keeps: what would make this measurement misleading."""
    notes = []
    if (server.cache_config or {}).get("enable_prefix_caching") == "True":
        notes.append(
            "the server has prefix caching on: later turns reuse the cached conversation, so TTFT and "
            "throughput differ from a no-prefix-cache measurement (the recipe measures with it off)"
        )
    context = server_info.max_model_len(server, model)
    # The last turn carries T - 1 replies of up to M tokens and asks for M more: T x M tokens before any prompt.
    wanted = cfg.max_tokens * (1 if cfg.independent_turns else cfg.turns_per_session)
    what = "--max-tokens" if cfg.independent_turns else f"{cfg.turns_per_session} turns x {cfg.max_tokens} reply tokens"
    if context is not None and wanted >= context:
        notes.append(
            f"the conversation can outgrow the model's context: {what} = {wanted} tokens before any prompt "
            f"text, and the server's max_model_len is {context}; vLLM refuses (HTTP 400) or cuts short requests "
            "beyond it. Lower --turns-per-session or --max-tokens"
        )
    return notes
