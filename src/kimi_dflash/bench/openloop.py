"""One open-loop repeat: conversations start on an arrival process's clock, turns follow reply + think time.

A dispatcher walks the seeded start offsets (``arrivals.ArrivalProcess``) and starts each conversation at
its time, whatever the others are doing. Inside a conversation, turn t+1 is scheduled at the moment turn t
finished plus a think time. ``--max-concurrency`` caps requests in flight (a semaphore around each
request; a conversation waiting for it keeps its place). Every request records when it was scheduled,
when the client's timer woke for it (dispatch) and when the cap let it through (admitted), so local
queueing is reported apart from server latency (``level_extras.open_loop_level``).

Connections come from a pool of keep-alive connections (open, reused, never shared by two requests at
once), so an in-flight request always has its own connection.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol

from kimi_dflash.bench import client, http1
from kimi_dflash.bench.arrivals import level_rng
from kimi_dflash.bench.records import CANCELLED, RequestRecord
from kimi_dflash.bench.workload import Prompt, session_prompts

if TYPE_CHECKING:
    from kimi_dflash.bench.settings import OpenLoopSettings

perf_counter = time.perf_counter
PRECONNECT_MAX = 64  # connections opened before the window when there is no cap


class Host(Protocol):
    """What a repeat needs from the Benchmark that runs it."""

    cfg: Any
    endpoint: client.Endpoint
    stopper: Any

    def _user(self, prompt: Prompt) -> dict[str, str]: ...

    def _body(self, messages: list[dict[str, str]]) -> bytes: ...

    async def after_failure(self, record: RequestRecord) -> None: ...


class ConnectionPool:
    def __init__(self, endpoint: client.Endpoint) -> None:
        self.endpoint = endpoint
        self.idle: list[http1.Connection] = []
        self.every: list[http1.Connection] = []

    async def preconnect(self, count: int) -> None:
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

    def give(self, conn: http1.Connection) -> None:
        self.idle.append(conn)

    def close(self) -> None:
        for conn in self.every:
            conn.close()


async def _sleep_until(when: float) -> None:
    # The loop may fire a timer up to its clock resolution early (uvloop: 1 ms); never send before the time.
    while (delay := when - perf_counter()) > 0:
        await asyncio.sleep(delay)


class OpenLoopRepeat:
    """One repeat of an open-loop level: ``await prepare()`` (connections, before the window), then
    ``await run(start)`` from the window's start (a perf_counter time); records go into ``sink``."""

    def __init__(self, host: Host, ol: OpenLoopSettings, rate: float, repeat: int, sink: list[RequestRecord]) -> None:
        cfg = host.cfg
        self.host, self.ol, self.rate, self.repeat, self.sink = host, ol, rate, repeat, sink
        self.offsets = ol.process(rate).offsets(ol.sessions_per_level, level_rng(cfg.seed, rate, repeat, 0))
        sessions, turns = ol.sessions_per_level, cfg.turns_per_session
        self.plans = [
            session_prompts(cfg.prompts, cfg.seed, sessions, repeat, s, turns, cfg.prompt_order)
            for s in range(sessions)
        ]
        self.cap = asyncio.Semaphore(ol.max_concurrency) if ol.max_concurrency else None
        self.pool = ConnectionPool(host.endpoint)

    @property
    def total_requests(self) -> int:
        return self.ol.sessions_per_level * self.host.cfg.turns_per_session

    async def prepare(self) -> None:
        # Connect before the window opens (send_time is taken after connecting anyway; this keeps the
        # connects out of the schedule lag of the first arrivals).
        await self.pool.preconnect(min(self.ol.sessions_per_level, self.ol.max_concurrency or PRECONNECT_MAX))

    async def _request(self, record: RequestRecord, messages: list[dict[str, str]]) -> Any:
        cfg, cap = self.host.cfg, self.cap
        record.dispatch_time = perf_counter()
        self.sink.append(record)  # before waiting: a cancelled request still leaves its record
        try:
            if cap is not None:
                await cap.acquire()
        except asyncio.CancelledError:
            record.error, record.done_time = CANCELLED, perf_counter()
            raise
        try:
            record.admitted_time = perf_counter()
            conn = self.pool.take()
            try:
                return await client.send(conn, self.host.endpoint, self.host._body(messages), cfg.stream, record)
            finally:
                self.pool.give(conn)
        finally:
            if cap is not None:
                cap.release()

    async def _conversation(self, index: int, scheduled: float) -> None:
        host, cfg = self.host, self.host.cfg
        think_rng = level_rng(cfg.seed, self.rate, self.repeat, 1 + index)
        history: list[dict[str, str]] = []
        if cfg.system_text:
            history.append({"role": "system", "content": cfg.system_text})
        for turn, prompt in enumerate(self.plans[index], start=1):
            await _sleep_until(scheduled)
            if host.stopper.stopped:
                return
            messages = [*history, host._user(prompt)]
            record = RequestRecord(sessions=self.ol.sessions_per_level, repeat=self.repeat, session=index, turn=turn)
            record.scheduled_time = scheduled
            reply = await self._request(record, messages)
            if record.ok and reply is not None and not cfg.independent_turns:
                history = [*messages, {"role": "assistant", "content": reply.content or reply.reasoning}]
            elif record.error is not None:
                await host.after_failure(record)
            scheduled = record.done_time + self.ol.think.draw(think_rng)

    async def run(self, start: float) -> None:
        tasks: list[asyncio.Task[None]] = []
        try:
            for index, offset in enumerate(self.offsets):
                when = start + float(offset)
                await _sleep_until(when)
                if self.host.stopper.stopped:
                    break
                tasks.append(asyncio.create_task(self._conversation(index, when)))
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            self.pool.close()
