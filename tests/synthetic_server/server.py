"""The synthetic server: routes requests, holds the schedule and counters, runs the shared ticker."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from synthetic_server import faults, prometheus_text
from synthetic_server.http import Connection, response
from synthetic_server.schedule import Schedule
from synthetic_server.stats import Stats
from synthetic_server.stream import Stream

COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")
NOT_FOUND = response("404 Not Found", b'{"error":"not found"}')


class SyntheticServer:
    """Routes requests; holds the schedule and the counters."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.api_key = schedule.api_key
        self.stats = Stats(accepted_per_pos=[0] * max(schedule.spec_tokens, 0))
        self.loop = asyncio.get_running_loop()
        self.created = int(time.time())
        self.event_cache: dict[tuple[Any, ...], bytes] = {}
        self.aligned: list[Stream] = []  # streams driven by the shared ticker (--aligned)
        self.tick_handle: asyncio.TimerHandle | None = None
        self.tick_index = 0
        self.epoch = self.loop.time()

    def enroll(self, stream: Stream) -> None:
        """--aligned: the stream's chunks go out on shared ticks, every chunk_interval from the epoch."""
        interval = self.schedule.chunk_interval_s
        due = stream.start + self.schedule.ttft_s
        stream.first_tick = max(math.ceil((due - self.epoch) / interval), self.tick_index + 1)
        self.aligned.append(stream)
        if self.tick_handle is None:
            self.tick_index = stream.first_tick
            self.tick_handle = self.loop.call_at(self.epoch + self.tick_index * interval, self._tick_all)

    def _tick_all(self) -> None:
        interval = self.schedule.chunk_interval_s
        k = self.tick_index
        self.stats.record_lag(self.loop.time() - (self.epoch + k * interval))
        keep: list[Stream] = []
        for stream in self.aligned:
            if stream.finished:
                continue
            if stream.first_tick > k or stream.emit_next():
                keep.append(stream)
        self.aligned = keep
        if keep:
            self.tick_index = k + 1
            self.tick_handle = self.loop.call_at(self.epoch + self.tick_index * interval, self._tick_all)
        else:
            self.tick_handle = None

    def handle(self, conn: Connection, method: str, target: str, body: bytes) -> None:
        path, _, query = target.partition("?")
        if method == "GET":
            conn.finish_response(self._get(path, query))
            return
        if method != "POST" or path not in COMPLETION_PATHS:
            conn.finish_response(NOT_FOUND)
            return
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if not isinstance(request, dict):
            conn.finish_response(response("400 Bad Request", b'{"error":"body is not JSON"}'))
            return
        fault = faults.pick(self.schedule.faults, self.stats.requests)
        self.stats.requests += 1
        self.stats.faults[fault] = self.stats.faults.get(fault, 0) + 1
        immediate = faults.immediate_response(fault)
        if immediate is not None:
            conn.finish_response(immediate)
            return
        stream = Stream(self, conn, request, chat=path.endswith("chat/completions"), fault=fault)
        conn.stream = stream
        if request.get("stream"):
            stream.start_stream()
        else:
            stream.start_plain()

    def _get(self, path: str, query: str) -> bytes:
        if path == "/health":
            return response("200 OK", b"")
        if path == "/version":
            return response("200 OK", b'{"version":"synthetic"}')
        if path == "/v1/models":
            return response("200 OK", json.dumps(self._models()).encode())
        if path == "/metrics":
            text = prometheus_text.render(self.schedule, self.stats)
            return response("200 OK", text.encode(), content_type="text/plain; version=0.0.4")
        if path == "/stats/requests":
            return response("200 OK", json.dumps(self.stats.request_log).encode())
        if path == "/stats":
            body = json.dumps(self.stats.as_dict()).encode()
            if "reset=1" in query:
                self.stats.reset_timing()
            return response("200 OK", body)
        return NOT_FOUND

    def _models(self) -> dict[str, Any]:
        model = self.schedule.model
        entry = {
            "id": model,
            "object": "model",
            "owned_by": "kimi-dflash-synthetic",
            "root": model,
            "max_model_len": self.schedule.max_model_len,
        }
        return {"object": "list", "data": [entry]}


async def serve(schedule: Schedule, host: str, port: int) -> None:
    server = SyntheticServer(schedule)
    listener = await server.loop.create_server(lambda: Connection(server), host, port, backlog=4096)
    bound = listener.sockets[0].getsockname()[1]
    # The first stdout line is the contract with whoever started us (process.running, client_capacity).
    print(f"listening on http://{host}:{bound}", flush=True)
    async with listener:
        await listener.serve_forever()
