"""The HTTP side: one aiohttp session, a connection pool sized to the concurrency, one request at a time.

The streaming hot loop takes a timestamp per network read and hands the bytes to a
``StreamAccumulator``, which parses all events of a read with one ``json.loads``: no per-token Python
work, so the event loop stays free to timestamp the other streams' reads promptly. Failures never raise
out of ``send``: they come back as a reason on the record.
"""

from __future__ import annotations

import asyncio
import errno
import json
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import aiohttp
import yarl

from kimi_dflash.bench import records as R
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.response import Reply, StreamAccumulator, interpret_body

perf_counter = time.perf_counter


@dataclass(frozen=True)
class Endpoint:
    """Where requests go and how they authenticate."""

    base_url: str  # without a trailing /v1
    api_key: str | None = field(default=None, repr=False)  # never printed
    timeout_s: float = 600.0

    @cached_property
    def chat_url(self) -> yarl.URL:
        return yarl.URL(f"{self.base_url}/v1/chat/completions")  # parsed once, not per request

    @cached_property
    def chat_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


def normalize_base_url(url: str) -> str:
    """Accept ``http://host:port``, ``.../`` or ``.../v1``; return the server root without a slash."""
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def make_session(pool_size: int, timeout_s: float) -> aiohttp.ClientSession:
    """A session whose pool never throttles: aiohttp's default cap is 100 connections."""
    connector = aiohttp.TCPConnector(
        limit=pool_size,
        limit_per_host=pool_size,
        keepalive_timeout=75,
        force_close=False,
        ttl_dns_cache=300,
    )
    trace = aiohttp.TraceConfig()
    trace.on_connection_queued_start.append(_queued_start)
    trace.on_connection_queued_end.append(_queued_end)
    trace.on_request_chunk_sent.append(_body_sent)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, 30.0)),
        trace_configs=[trace],
        auto_decompress=False,
    )


async def _queued_start(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, dict):
        ctx.trace_request_ctx["queued"] = perf_counter()


async def _queued_end(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, dict) and "queued" in ctx.trace_request_ctx:
        ctx.trace_request_ctx["queue_time"] = perf_counter() - ctx.trace_request_ctx["queued"]


async def _body_sent(session: Any, ctx: Any, params: Any) -> None:
    # aiohttp fires this right before it writes the request body to the socket: the moment the
    # request actually leaves. Only the first chunk counts (our bodies are a single bytes chunk).
    if isinstance(ctx.trace_request_ctx, dict) and "sent" not in ctx.trace_request_ctx:
        ctx.trace_request_ctx["sent"] = perf_counter()


def chat_payload(
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    temperature: float,
    stream: bool,
    ignore_eos: bool = False,
    extra_body: dict[str, Any] | None = None,
) -> bytes:
    """The request body. Temperature is always sent: server defaults differ between versions."""
    payload: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": stream,
    }
    if stream:
        payload["stream_options"] = {"include_usage": True}
    if ignore_eos:
        payload["ignore_eos"] = True
    if extra_body:
        payload.update(extra_body)
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


async def send(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    body: bytes,
    stream: bool,
    record: RequestRecord,
) -> Reply | None:
    """Send one chat request; fill ``record`` with timestamps, counts or a failure reason.

    ``record.ready_time`` is taken before aiohttp builds the request, ``record.send_time`` when the body
    is handed to the socket (TTFT and E2EL start there, so request-building time and the queueing of
    many simultaneous sends on one event loop do not count as server latency; the difference is
    reported as client send time). Returns the decoded reply (for the conversation history), or None
    when nothing usable arrived.
    """
    trace_ctx: dict[str, float] = {}
    accumulator = StreamAccumulator()
    reply: Reply | None = None
    record.ready_time = perf_counter()
    try:
        async with session.post(
            endpoint.chat_url, data=body, headers=endpoint.chat_headers, trace_request_ctx=trace_ctx
        ) as response:
            record.status = response.status
            record.send_time = trace_ctx.get("sent", record.ready_time)
            if response.status != 200:
                detail = await _read_error_body(response)
                record.done_time = perf_counter()
                record.error = f"http_{response.status}"
                record.error_detail = detail
                return None
            if stream:
                feed = accumulator.feed
                # The hot loop: timestamp the read, then hand it to the accumulator (one JSON parse
                # for all events in the read). Reading continues to the end of the body after [DONE]
                # so the connection goes back to the pool.
                async for data in response.content.iter_any():
                    feed(perf_counter(), data)
                record.done_time = perf_counter()
                reply = accumulator.finish()
            else:
                raw = await response.read()
                record.done_time = perf_counter()
                reply = interpret_body(raw)
    except asyncio.CancelledError:
        record.done_time = perf_counter()
        record.send_time = trace_ctx.get("sent", record.ready_time)
        record.error = R.CANCELLED
        raise
    except Exception as exc:  # noqa: BLE001 - every failure must become a counted reason
        record.done_time = perf_counter()
        record.send_time = trace_ctx.get("sent", record.ready_time)
        reason: str | None
        reason, detail = classify_exception(exc)
        # A server that sent [DONE] but never ended the body still delivered a complete reply.
        if reason == R.TIMEOUT and accumulator.done:
            reply = accumulator.finish()
            reason = None
        if reason is not None:
            record.error = reason
            record.error_detail = detail
            record.token_chunks = accumulator.token_chunks  # what arrived before the failure
            return None
    record.queue_time = trace_ctx.get("queue_time", 0.0)
    assert reply is not None
    _fill_record(record, reply)
    return reply


def _fill_record(record: RequestRecord, reply: Reply) -> None:
    record.first_token_time = reply.first_token_time
    record.last_token_time = reply.last_token_time
    record.chunk_times = reply.chunk_times
    record.token_chunks = reply.token_chunks
    record.finish_reason = reply.finish_reason
    record.reply_chars = len(reply.content) + len(reply.reasoning)
    usage = reply.usage or {}
    completion = usage.get("completion_tokens")
    if isinstance(completion, int) and completion >= 0:
        record.output_tokens = completion
        record.tokens_source = R.TOKENS_FROM_USAGE
    else:
        # No usage: one token per token-bearing chunk. Wrong under speculative decoding (a chunk then
        # carries several tokens), so such records are flagged and counted in the report.
        record.output_tokens = reply.token_chunks
        record.tokens_source = R.TOKENS_FROM_CHUNKS
    prompt = usage.get("prompt_tokens")
    record.prompt_tokens = prompt if isinstance(prompt, int) else None
    if reply.error is not None:
        record.error = reply.error
        record.error_detail = reply.error_detail


async def _read_error_body(response: aiohttp.ClientResponse) -> str:
    try:
        raw = await asyncio.wait_for(response.content.read(2048), timeout=5)
    except Exception:  # noqa: BLE001 - the status code is the fact; the body is a courtesy
        raw = b""
    text = raw.decode("utf-8", "replace").strip().replace("\n", " ")
    return f"HTTP {response.status} {response.reason or ''}: {text[:300]}".strip()


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """Map what aiohttp/asyncio raised to a failure reason and a one-line detail."""
    detail = f"{type(exc).__name__}: {exc}"[:300]
    chain = _causes(exc)
    if any(isinstance(e, (asyncio.TimeoutError, TimeoutError, aiohttp.ServerTimeoutError)) for e in chain):
        return R.TIMEOUT, detail
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return R.CONNECTION_REFUSED, detail
    if isinstance(exc, aiohttp.ClientConnectorError):
        if getattr(exc, "os_error", None) is not None and getattr(exc.os_error, "errno", None) == errno.ECONNREFUSED:
            return R.CONNECTION_REFUSED, detail
        return R.CONNECTION_ERROR, detail
    if (
        any(isinstance(e, ConnectionResetError) for e in chain)
        or any(getattr(e, "errno", None) in (errno.ECONNRESET, errno.EPIPE) for e in chain)
        # aiohttp reports a reset in the middle of a body only inside the ClientPayloadError message
        or any("ConnectionResetError" in str(e) for e in chain)
    ):
        return R.CONNECTION_RESET, detail
    if any(isinstance(e, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)) for e in chain):
        return R.CONNECTION_CLOSED, detail
    if isinstance(exc, aiohttp.ClientResponseError):
        return R.BAD_RESPONSE, detail
    if isinstance(exc, (aiohttp.ClientOSError, ConnectionError)):
        return R.CONNECTION_ERROR, detail
    return R.CLIENT_ERROR, detail


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and everything it wraps (cause, context, and exceptions aiohttp keeps in .args)."""
    seen: list[BaseException] = []
    queue: list[BaseException] = [exc]
    while queue and len(seen) < 16:
        current = queue.pop(0)
        if any(current is s for s in seen):
            continue
        seen.append(current)
        queue.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        queue.extend(arg for arg in getattr(current, "args", ()) if isinstance(arg, BaseException))
    return seen


async def get_json(session: aiohttp.ClientSession, url: str, api_key: str | None, timeout_s: float = 10.0) -> Any:
    """GET a JSON document (server info endpoints). Raises on transport errors and non-200."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
        if response.status != 200:
            raise aiohttp.ClientResponseError(
                response.request_info, response.history, status=response.status, message=response.reason or ""
            )
        return await response.json(content_type=None)


async def get_text(session: aiohttp.ClientSession, url: str, api_key: str | None, timeout_s: float = 10.0) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
        if response.status != 200:
            raise aiohttp.ClientResponseError(
                response.request_info, response.history, status=response.status, message=response.reason or ""
            )
        return await response.text()
