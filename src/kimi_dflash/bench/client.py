"""The HTTP side: one aiohttp session, a connection pool sized to the concurrency, one request at a time.

The streaming hot loop does nothing per network read but take a timestamp and keep the bytes; parsing
happens once the body has ended (``response.interpret_stream``). That keeps the event loop free to
timestamp other streams' reads promptly, which is what keeps the client from distorting what it
measures. Failures never raise out of ``send``: they come back as a reason on the record.
"""

from __future__ import annotations

import asyncio
import errno
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from kimi_dflash.bench import records as R
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.response import Reply, interpret_body, interpret_stream

perf_counter = time.perf_counter


@dataclass(frozen=True)
class Endpoint:
    """Where requests go and how they authenticate."""

    base_url: str  # without a trailing /v1
    api_key: str | None = None
    timeout_s: float = 600.0

    @property
    def chat_url(self) -> str:
        return f"{self.base_url}/v1/chat/completions"

    def headers(self) -> dict[str, str]:
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

    Returns the decoded reply (for the conversation history), or None when nothing usable arrived.
    """
    trace_ctx: dict[str, float] = {}
    reads: list[tuple[float, bytes]] = []
    reply: Reply | None = None
    record.send_time = perf_counter()
    try:
        async with session.post(
            endpoint.chat_url, data=body, headers=endpoint.headers(), trace_request_ctx=trace_ctx
        ) as response:
            record.status = response.status
            if response.status != 200:
                detail = await _read_error_body(response)
                record.done_time = perf_counter()
                record.error = f"http_{response.status}"
                record.error_detail = detail
                return None
            if stream:
                append = reads.append
                # The hot loop: a timestamp and a list append per network read, nothing else.
                async for data in response.content.iter_any():
                    append((perf_counter(), data))
                record.done_time = perf_counter()
                reply = interpret_stream(reads)
            else:
                raw = await response.read()
                record.done_time = perf_counter()
                reply = interpret_body(raw)
    except asyncio.CancelledError:
        record.done_time = perf_counter()
        record.error = R.CANCELLED
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure must become a counted reason
        record.done_time = perf_counter()
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        reason, detail = classify_exception(exc)
        # A server that sent [DONE] but never ended the body still delivered a complete reply.
        if reason == R.TIMEOUT and reads:
            reply = interpret_stream(reads)
            if reply.done and reply.error is None:
                record.done_time = reads[-1][0]
                reason = None
        if reason is not None:
            record.error = reason
            record.error_detail = detail
            if reads:  # keep what arrived, for the record (not counted as a success)
                partial = interpret_stream(reads)
                record.token_chunks = partial.token_chunks
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
    if any(isinstance(e, ConnectionResetError) for e in chain) or any(
        getattr(e, "errno", None) in (errno.ECONNRESET, errno.EPIPE) for e in chain
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
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        current = current.__cause__ or current.__context__
    # aiohttp wraps payload errors around the original exception in .args
    for e in list(seen):
        for arg in getattr(e, "args", ()):
            if isinstance(arg, BaseException) and arg not in seen:
                seen.append(arg)
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
