"""What a server sent, as facts: token timestamps, reply text, usage, or a failure reason (pure: no I/O, no clock)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kimi_dflash.bench.records import BAD_RESPONSE, EMPTY_RESPONSE, MALFORMED_SSE, SERVER_ERROR_EVENT, TRUNCATED_STREAM
from kimi_dflash.bench.sse import SSEDecoder

DONE = b"[DONE]"
_loads = json.loads


@dataclass(slots=True)
class Reply:
    first_token_time: float | None = None
    last_token_time: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    content: str = ""
    reasoning: str = ""
    usage: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None  # vLLM's per-request "metrics" object (final usage chunk / body)
    token_ids: list[int] | None = None  # generated token ids, when the server sent them (return_token_ids)
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None
    error_detail: str = ""

    @property
    def token_chunks(self) -> int:
        return len(self.chunk_times)


class StreamAccumulator:
    """Incremental SSE body interpreter: ``feed(arrival_time, data)`` per read, then ``finish()``."""

    __slots__ = ("_content", "_decoder", "_reasoning", "_times", "reply")

    def __init__(self) -> None:
        self._decoder = SSEDecoder()
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._times: list[float] = []
        self.reply = Reply()  # usage, metrics, ids, finish reason, [DONE] seen, error; finish() adds text and times

    @property
    def token_chunks(self) -> int:
        return len(self._times)

    def feed(self, arrival: float, data: bytes) -> None:
        if self.reply.done or self.reply.error is not None:
            return
        decoder = self._decoder
        if data[:7] == b"data: {" and data[-3:] == b"}\n\n" and data.find(b"\n") == len(data) - 2 and decoder.idle:
            payloads = [data[6:-2]]  # fast path: exactly one single-line JSON event (no SSE bookkeeping)
        else:
            payloads = decoder.feed(data)
        if not payloads:
            return
        for i, payload in enumerate(payloads):
            if payload == DONE:
                self.reply.done = True
                payloads = payloads[:i]
                break
        if not payloads:
            return
        # One json.loads per read, not per event: the client's CPU is the benchmark's capacity limit.
        try:
            if len(payloads) == 1:
                events = [_loads(payloads[0].decode("utf-8"))]
            else:
                events = _loads(b"[" + b",".join(payloads) + b"]")
        except (ValueError, UnicodeDecodeError):
            events = self._parse_one_by_one(payloads)
        times, content = self._times, self._content
        for event in events:
            # Fast path for the common delta; anything else goes through the careful _take.
            try:
                choice = event["choices"][0]
                delta = choice["delta"]
                text = delta["content"]
                plain = (
                    len(delta) == 1
                    and choice.get("finish_reason") is None
                    and event.get("usage") is None
                    and choice.get("token_ids") is None
                )
            except (KeyError, IndexError, TypeError, AttributeError):
                plain = False
            if plain and text and text.__class__ is str:
                content.append(text)
                times.append(arrival)
                continue
            if not self._take(arrival, event):
                return

    def _parse_one_by_one(self, payloads: list[bytes]) -> list[Any]:
        """Slow path after a batch failed: keep the good events before the first bad one."""
        events: list[Any] = []
        for payload in payloads:
            try:
                events.append(_loads(payload.decode("utf-8")))
            except (ValueError, UnicodeDecodeError):
                events.append(_Malformed(payload))
                break
        return events

    def _take(self, arrival: float, event: Any) -> bool:
        if isinstance(event, _Malformed):
            return self._fail(MALFORMED_SSE, f"data event is not JSON: {_clip(event.payload)}")
        if not isinstance(event, dict):
            return self._fail(MALFORMED_SSE, f"data event is not a JSON object: {_clip(json.dumps(event).encode())}")
        choices = event.get("choices")
        if choices:
            choice = choices[0]
            if not isinstance(choice, dict):
                return self._fail(MALFORMED_SSE, f"choice is not an object: {choice!r:.120}")
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text = delta.get("content")
                thought = delta.get("reasoning") or delta.get("reasoning_content")
                if text:
                    self._content.append(text if isinstance(text, str) else str(text))
                if thought:
                    self._reasoning.append(thought if isinstance(thought, str) else str(thought))
                if text or thought or delta.get("tool_calls"):
                    self._times.append(arrival)
            elif delta is not None:
                return self._fail(MALFORMED_SSE, f"delta is not an object: {delta!r:.120}")
            else:
                text = choice.get("text")
                if text:
                    self._content.append(text if isinstance(text, str) else str(text))
                    self._times.append(arrival)
            finish = choice.get("finish_reason")
            if finish:
                self.reply.finish_reason = str(finish)
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                if self.reply.token_ids is None:
                    self.reply.token_ids = []
                self.reply.token_ids.extend(ids)
        elif "error" in event:
            return self._fail(SERVER_ERROR_EVENT, _error_message(event["error"]))
        usage = event.get("usage")
        if usage and isinstance(usage, dict):
            self.reply.usage = usage
            metrics = event.get("metrics")
            if isinstance(metrics, dict):
                self.reply.metrics = metrics
        return True

    def _fail(self, reason: str, detail: str) -> bool:
        self.reply.error, self.reply.error_detail, self.reply.done = reason, detail, False
        return False

    def finish(self) -> Reply:
        """The body ended (or the caller gave up): judge the stream."""
        reply, times = self.reply, self._times
        reply.chunk_times = times
        reply.first_token_time, reply.last_token_time = (times[0], times[-1]) if times else (None, None)
        reply.content, reply.reasoning = "".join(self._content), "".join(self._reasoning)
        if reply.error is None and not reply.done:
            pending = self._decoder.pending
            reply.error = TRUNCATED_STREAM
            reply.error_detail = "body ended without data: [DONE]" + (
                f" (unfinished event: {_clip(pending)})" if pending.strip() else ""
            )
        if reply.error is None and not times:
            reply.error = EMPTY_RESPONSE
            reply.error_detail = "stream finished without a token-bearing chunk"
        return reply


@dataclass(frozen=True, slots=True)
class _Malformed:
    payload: bytes


def interpret_body(body: bytes) -> Reply:
    try:
        event = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return Reply(error=BAD_RESPONSE, error_detail=f"body is not JSON: {_clip(body)}")
    if not isinstance(event, dict):
        return Reply(error=BAD_RESPONSE, error_detail=f"body is not a JSON object: {_clip(body)}")
    if "error" in event and not event.get("choices"):
        return Reply(error=SERVER_ERROR_EVENT, error_detail=_error_message(event["error"]))
    choices = event.get("choices")
    if not choices or not isinstance(choices[0], dict):
        return Reply(error=BAD_RESPONSE, error_detail=f"no choices in body: {_clip(body)}")
    reply, choice = Reply(done=True), choices[0]
    message = choice.get("message")
    message = message if isinstance(message, dict) else {"content": choice.get("text")}  # /v1/completions: text
    reply.content = str(message.get("content") or "")
    reply.reasoning = str(message.get("reasoning") or message.get("reasoning_content") or "")
    reply.finish_reason = choice.get("finish_reason")
    ids = choice.get("token_ids")
    reply.token_ids = ids if isinstance(ids, list) else None
    metrics = event.get("metrics")
    reply.metrics = metrics if isinstance(metrics, dict) else None
    usage = event.get("usage")
    reply.usage = usage if isinstance(usage, dict) and usage else None
    if not (reply.content or reply.reasoning or message.get("tool_calls")):
        reply.error, reply.error_detail = EMPTY_RESPONSE, "response carried no generated text"
    return reply


def _error_message(error: Any) -> str:
    return str((error.get("message") if isinstance(error, dict) else None) or error)[:300]


def _clip(data: bytes, limit: int = 120) -> str:
    text = data[:limit].decode("utf-8", "replace")
    return repr(text + ("..." if len(data) > limit else ""))
