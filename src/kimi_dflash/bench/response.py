"""Turn what a server sent into facts: token timestamps, reply text, usage, or a failure reason.

Pure functions over ``(arrival_time, bytes)`` reads, so every framing corner case is tested without a
network. A chunk is *token-bearing* when its first choice carries non-empty ``content``, reasoning
(``reasoning`` / ``reasoning_content``: Kimi streams its reasoning first, and those are generated tokens)
or ``tool_calls`` (chat), or non-empty ``text`` (completions). The role-only first chunk and the final
usage chunk (empty ``choices``) are not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kimi_dflash.bench import records as R
from kimi_dflash.bench.sse import SSEDecoder

DONE = b"[DONE]"


@dataclass(slots=True)
class Reply:
    """Everything the metrics and the conversation history need from one response."""

    first_token_time: float | None = None
    last_token_time: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    content: str = ""
    reasoning: str = ""
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None
    error_detail: str = ""

    @property
    def token_chunks(self) -> int:
        return len(self.chunk_times)


def interpret_stream(reads: list[tuple[float, bytes]]) -> Reply:
    """Decode an SSE body. ``reads`` are the body's network reads with their arrival times, in order.

    Events inherit the arrival time of the read that completed them. Anything after ``[DONE]`` is
    ignored. A body that ends without ``[DONE]`` is a ``truncated_stream`` failure.
    """
    reply = Reply()
    decoder = SSEDecoder()
    content_parts: list[str] = []
    reasoning_parts: list[str] = []
    times = reply.chunk_times
    loads = json.loads
    for arrival, data in reads:
        for payload in decoder.feed(data):
            if payload == DONE:
                reply.done = True
                break
            try:
                event = loads(payload)
            except ValueError:
                reply.error = R.MALFORMED_SSE
                reply.error_detail = f"data event is not JSON: {_clip(payload)}"
                break
            if not isinstance(event, dict):
                reply.error = R.MALFORMED_SSE
                reply.error_detail = f"data event is not a JSON object: {_clip(payload)}"
                break
            choices = event.get("choices")
            if choices:
                choice = choices[0]
                if not isinstance(choice, dict):
                    reply.error = R.MALFORMED_SSE
                    reply.error_detail = f"choice is not an object: {_clip(payload)}"
                    break
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    text = delta.get("content")
                    thought = delta.get("reasoning") or delta.get("reasoning_content")
                    if text and not isinstance(text, str):
                        text = str(text)
                    if thought and not isinstance(thought, str):
                        thought = str(thought)
                    bearing = bool(text) or bool(thought) or bool(delta.get("tool_calls"))
                    if text:
                        content_parts.append(text)
                    if thought:
                        reasoning_parts.append(thought)
                elif delta is not None:
                    reply.error = R.MALFORMED_SSE
                    reply.error_detail = f"delta is not an object: {_clip(payload)}"
                    break
                else:
                    text = choice.get("text")
                    if text and not isinstance(text, str):
                        text = str(text)
                    bearing = bool(text)
                    if text:
                        content_parts.append(text)
                if bearing:
                    times.append(arrival)
                finish = choice.get("finish_reason")
                if finish:
                    reply.finish_reason = finish
            elif "error" in event:
                reply.error = R.SERVER_ERROR_EVENT
                reply.error_detail = _error_message(event["error"])
                break
            usage = event.get("usage")
            if usage:
                reply.usage = usage
        if reply.done or reply.error:
            break
    if times:
        reply.first_token_time = times[0]
        reply.last_token_time = times[-1]
    reply.content = "".join(content_parts)
    reply.reasoning = "".join(reasoning_parts)
    if reply.error is None and not reply.done:
        reply.error = R.TRUNCATED_STREAM
        pending = decoder.pending
        reply.error_detail = "body ended without data: [DONE]" + (
            f" (unfinished event: {_clip(pending)})" if pending else ""
        )
    if reply.error is None and not times:
        reply.error = R.EMPTY_RESPONSE
        reply.error_detail = "stream finished without a token-bearing chunk"
    return reply


def interpret_body(body: bytes) -> Reply:
    """Decode a non-streaming chat or completions response body."""
    reply = Reply()
    try:
        event = json.loads(body)
    except ValueError:
        reply.error = R.BAD_RESPONSE
        reply.error_detail = f"body is not JSON: {_clip(body)}"
        return reply
    if not isinstance(event, dict):
        reply.error = R.BAD_RESPONSE
        reply.error_detail = f"body is not a JSON object: {_clip(body)}"
        return reply
    if "error" in event and not event.get("choices"):
        reply.error = R.SERVER_ERROR_EVENT
        reply.error_detail = _error_message(event["error"])
        return reply
    choices = event.get("choices")
    if not choices or not isinstance(choices[0], dict):
        reply.error = R.BAD_RESPONSE
        reply.error_detail = f"no choices in body: {_clip(body)}"
        return reply
    choice = choices[0]
    message = choice.get("message")
    if isinstance(message, dict):
        reply.content = message.get("content") or ""
        reply.reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
    else:
        reply.content = choice.get("text") or ""
    reply.finish_reason = choice.get("finish_reason")
    reply.usage = event.get("usage") or None
    reply.done = True
    if not (reply.content or reply.reasoning or (isinstance(message, dict) and message.get("tool_calls"))):
        reply.error = R.EMPTY_RESPONSE
        reply.error_detail = "response carried no generated text"
    return reply


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)[:300]
    return str(error)[:300]


def _clip(data: bytes, limit: int = 120) -> str:
    text = data[:limit].decode("utf-8", "replace")
    return repr(text + ("..." if len(data) > limit else ""))
