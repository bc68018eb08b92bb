"""The bytes of a reply: SSE events of a streaming completion, or the body of a non-streaming one.

Text is a fixed cycle of words, one per token, so replies are deterministic and events can be cached:
a capacity run writes hundreds of thousands of identical chunks.
"""

from __future__ import annotations

import json
from typing import Any

from synthetic_server.schedule import Schedule

WORDS = [
    " alpha", " beta", " gamma", " delta", " eps", " zeta", " eta", " theta", " iota", " kappa",
    " lambda", " mu", " nu", " xi", " omicron", " pi", " rho", " sigma", " tau", " upsilon",
]  # fmt: skip
EVENT_CACHE_LIMIT = 100_000


def words(start: int, count: int) -> str:
    return "".join(WORDS[(start + j) % len(WORDS)] for j in range(count))


class StreamEvents:
    """SSE events of one streaming reply (chat or completions), LF or CRLF line endings."""

    def __init__(
        self, schedule: Schedule, cache: dict[tuple[Any, ...], bytes], created: int, chat: bool, model: str, crlf: bool
    ) -> None:
        self.schedule = schedule
        self.cache = cache
        self.chat = chat
        self.model = model
        self.crlf = crlf
        self.sep = b"\r\n\r\n" if crlf else b"\n\n"
        # One id for every stream: clients do not look at it, and it lets events be cached.
        self.prefix = (
            f'{{"id":"cmpl-synthetic","object":"{"chat.completion.chunk" if chat else "text_completion"}",'
            f'"created":{created},"model":{json.dumps(model)},"choices":['
        ).encode()

    def event(self, payload: bytes) -> bytes:
        return b"data: " + payload + self.sep

    def content(self, start: int, size: int, last: bool) -> bytes:
        """The chunk carrying tokens ``start .. start + size - 1`` (reasoning first, then content)."""
        schedule = self.schedule
        reasoning_left = min(max(0, schedule.reasoning_tokens - start), size) if self.chat else 0
        key = (self.chat, self.crlf, size, start % len(WORDS), last, reasoning_left, self.model)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        text = words(start, size)
        finish = b'"length"' if last else b"null"
        if self.chat:
            if reasoning_left >= size:
                delta = {schedule.reasoning_field: text}
            elif reasoning_left > 0:  # a chunk that straddles the end of the reasoning
                split = len(words(start, reasoning_left))
                delta = {schedule.reasoning_field: text[:split], "content": text[split:]}
            else:
                delta = {"content": text}
            choice = b'{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}' % (
                json.dumps(delta, separators=(",", ":")).encode(),
                finish,
            )
        else:
            choice = b'{"index":0,"text":%s,"logprobs":null,"finish_reason":%s}' % (json.dumps(text).encode(), finish)
        event = self.event(self.prefix + choice + b"]}")
        if len(self.cache) < EVENT_CACHE_LIMIT:
            self.cache[key] = event
        return event

    def role(self) -> bytes:
        return self.event(
            self.prefix
            + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
        )

    def usage(self, prompt_tokens: int, completion_tokens: int, metrics: dict[str, Any] | None = None) -> bytes:
        usage = _usage(prompt_tokens, completion_tokens)
        tail = b',"metrics":' + json.dumps(metrics).encode() if metrics else b""
        return self.event(self.prefix + b"]," + b'"usage":' + json.dumps(usage).encode() + tail + b"}")

    def done(self) -> bytes:
        return self.event(b"[DONE]")


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def plain_body(
    schedule: Schedule, chat: bool, model: str, prompt_tokens: int, total: int, metrics: dict[str, Any] | None = None
) -> bytes:
    """The JSON body of a non-streaming reply of ``total`` tokens."""
    text = words(0, total)
    reasoning_n = min(schedule.reasoning_tokens, total) if chat else 0
    split = len(words(0, reasoning_n))
    choice: dict[str, Any]
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": text[split:]}
        if reasoning_n:
            message[schedule.reasoning_field] = text[:split]
        choice = {"index": 0, "message": message, "finish_reason": "length"}
    else:
        choice = {"index": 0, "text": text, "finish_reason": "length"}
    body = {
        "id": "cmpl",
        "object": "chat.completion",
        "model": model,
        "choices": [choice],
        "usage": _usage(prompt_tokens, total),
    }
    if metrics:
        body["metrics"] = metrics
    return json.dumps(body).encode()


def count_prompt_words(request: dict[str, Any]) -> int:
    """The prompt's length in words: what the server reports as prompt tokens."""
    if "messages" in request:
        count = 0
        for message in request.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                count += len(content.split())
            elif isinstance(content, list):
                count += sum(len(str(part.get("text", "")).split()) for part in content if isinstance(part, dict))
        return count
    prompt = request.get("prompt")
    return len(prompt.split()) if isinstance(prompt, str) else 1
