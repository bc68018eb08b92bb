"""The HTTP side: chat requests on each session's own ``http1.Connection``, the GET endpoints through aiohttp.
Failures never raise out of ``send``: they come back as a reason on the record."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import ssl
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from kimi_dflash.bench import descriptors, http1, records, spec_request
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.response import Reply, StreamAccumulator, interpret_body

perf_counter = time.perf_counter


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # server root (may carry a path prefix), without a trailing /v1
    api_key: str | None = field(default=None, repr=False)  # never printed
    timeout_s: float = 600.0
    api: str = "chat"  # or "completions": POST /v1/completions with a prompt
    extra_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # --header (may hold credentials)

    @cached_property
    def target(self) -> http1.Target:
        return http1.Target.from_url(self.base_url)

    @cached_property
    def chat_path(self) -> str:
        route = "/v1/completions" if self.api == "completions" else "/v1/chat/completions"
        return urlsplit(self.base_url).path.rstrip("/") + route

    @cached_property
    def chat_headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",
            "Accept": "text/event-stream, application/json",
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.extra_headers)
        return headers

    def connection(self) -> http1.Connection:
        return http1.Connection(self.target, connect_timeout_s=min(self.timeout_s, 30.0))


def request_payload(
    model: str,
    content: dict[str, Any],
    max_tokens: int,
    temperature: float,
    stream: bool,
    ignore_eos: bool = False,
    extra_body: dict[str, Any] | None = None,
) -> bytes:
    """The body of either endpoint; temperature is always sent, as server defaults differ between versions."""
    payload: dict[str, Any] = {
        "model": model,
        **content,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": stream,
    }
    if stream:
        payload["stream_options"] = {"include_usage": True}
    if ignore_eos:
        payload["ignore_eos"] = True
    if extra_body:
        _merge(payload, extra_body)
    try:
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (e.g. a server reply carried into the history): send it escaped
        return json.dumps(payload).encode("ascii")


def _merge(payload: dict[str, Any], extra_body: dict[str, Any]) -> None:
    """--extra-body over the payload; stream_options is merged so include_usage (the token count) stays on."""
    for key, value in extra_body.items():
        if key == "stream_options" and isinstance(value, dict) and "stream_options" in payload:
            payload["stream_options"] = {**value, "include_usage": True}
        elif key != "stream_options" or payload.get("stream"):
            payload[key] = value


async def send(
    conn: http1.Connection, endpoint: Endpoint, body: bytes, stream: bool, record: RequestRecord
) -> Reply | None:
    """Fill ``record`` with timestamps, counts or a failure reason; return the reply, or None when nothing usable
    arrived. TTFT and E2EL start when the bytes reach the socket: local connecting and queueing are not the server's."""
    accumulator = StreamAccumulator()

    def sent(at: float) -> None:
        record.send_time = at

    record.ready_time = record.send_time = perf_counter()
    on_body = accumulator.feed if stream else None
    try:
        response = await conn.post(endpoint.chat_path, body, endpoint.chat_headers, on_body, sent, endpoint.timeout_s)
    except asyncio.CancelledError:
        record.done_time, record.error = perf_counter(), records.CANCELLED
        raise
    except Exception as exc:  # noqa: BLE001 - every failure must become a counted reason
        record.done_time = perf_counter()
        reason, detail = classify_exception(exc)
        # A server that sent [DONE] but never ended the body still delivered a complete reply.
        if reason == records.TIMEOUT and stream and accumulator.reply.done:
            return _finish(record, accumulator.finish())
        record.error, record.error_detail = reason, detail
        record.token_chunks = accumulator.token_chunks  # what arrived before the failure
        return None
    record.done_time, record.status = perf_counter(), response.status
    if response.status != 200:
        text = response.body[:2048].decode("utf-8", "replace").strip().replace("\n", " ")
        record.error = f"http_{response.status}"
        record.error_detail = f"HTTP {response.status} {response.reason}: {text[:300]}".strip()
        return None
    return _finish(record, accumulator.finish() if stream else interpret_body(response.body))


def _finish(record: RequestRecord, reply: Reply) -> Reply:
    for name in ("first_token_time", "last_token_time", "chunk_times", "token_chunks", "finish_reason"):
        setattr(record, name, getattr(reply, name))
    record.reply_chars = len(reply.content) + len(reply.reasoning)
    usage = reply.usage or {}
    completion = usage.get("completion_tokens")
    if isinstance(completion, int) and completion >= 0:
        record.output_tokens = completion
        record.tokens_source = records.TOKENS_FROM_USAGE
    else:
        # No usage: one token per token-bearing chunk. Wrong under speculative decoding (a chunk then
        # carries several tokens), so such records are flagged and counted in the report.
        record.output_tokens = reply.token_chunks
        record.tokens_source = records.TOKENS_FROM_CHUNKS
    prompt = usage.get("prompt_tokens")
    record.prompt_tokens = prompt if isinstance(prompt, int) else None
    record.reply_sha256, record.token_ids_sha256 = reply_hashes(reply)
    record.spec = spec_request.parse(reply.metrics)
    if reply.error is not None:
        record.error, record.error_detail = reply.error, reply.error_detail
    return reply


def reply_hashes(reply: Reply) -> tuple[str, str | None]:
    """sha256 of the reply text (reasoning, NUL, content) and of its token ids when the server sent them."""
    # surrogatepass: a reply holding a lone surrogate (escaped in the server's JSON) is hashed, not a crash
    raw = reply.reasoning.encode("utf-8", "surrogatepass") + b"\0" + reply.content.encode("utf-8", "surrogatepass")
    text = hashlib.sha256(raw).hexdigest()
    ids = None
    if reply.token_ids is not None:
        ids = hashlib.sha256(",".join(str(i) for i in reply.token_ids).encode("ascii", "replace")).hexdigest()
    return text, ids


def classify_exception(exc: BaseException) -> tuple[str, str]:
    detail = f"{type(exc).__name__}: {exc}"[:300]
    chain = _causes(exc)
    if descriptors.local_errno(chain) is not None:  # before the connection reasons: it is not the server's
        return records.CLIENT_OUT_OF_RESOURCES, detail

    def found(kinds: tuple[type[BaseException], ...], errnos: tuple[int, ...] = ()) -> bool:
        return any(isinstance(e, kinds) or getattr(e, "errno", None) in errnos for e in chain)

    if found((asyncio.TimeoutError, TimeoutError, aiohttp.ServerTimeoutError)):
        return records.TIMEOUT, detail
    if found((ConnectionRefusedError,), (errno.ECONNREFUSED,)):
        return records.CONNECTION_REFUSED, detail
    if found((http1.BadResponse,)):
        return records.BAD_RESPONSE, detail
    # aiohttp reports a reset in the middle of a body only inside the ClientPayloadError message
    if found((ConnectionResetError,), (errno.ECONNRESET, errno.EPIPE)) or any(
        "ConnectionResetError" in str(e) for e in chain
    ):
        return records.CONNECTION_RESET, detail
    if found((http1.ConnectionClosed, aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return records.CONNECTION_CLOSED, detail
    if isinstance(exc, aiohttp.ClientResponseError):
        return records.BAD_RESPONSE, detail
    if found((OSError, ssl.SSLError, aiohttp.ClientError)):
        return records.CONNECTION_ERROR, detail
    return records.CLIENT_ERROR, detail


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


async def get_text(session: aiohttp.ClientSession, url: str, api_key: str | None, timeout_s: float = 10.0) -> str:
    """GET a server info endpoint (/v1/models, /version, /metrics). Raises on transport errors and non-200."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
        if response.status != 200:
            raise aiohttp.ClientResponseError(
                response.request_info, response.history, status=response.status, message=response.reason or ""
            )
        return await response.text()


async def get_json(session: aiohttp.ClientSession, url: str, api_key: str | None, timeout_s: float = 10.0) -> Any:
    text = await get_text(session, url, api_key, timeout_s)
    return json.loads(text) if text.strip() else None
