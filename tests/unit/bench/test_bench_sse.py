"""SSE framing and stream interpretation: every corner case the network can produce, without a network."""

from __future__ import annotations

import json

import pytest

from bench_helpers import interpret_stream
from kimi_dflash.bench.records import BAD_RESPONSE, EMPTY_RESPONSE, MALFORMED_SSE, SERVER_ERROR_EVENT, TRUNCATED_STREAM
from kimi_dflash.bench.response import interpret_body
from kimi_dflash.bench.sse import SSEDecoder


def chunk(
    content: str | None = None, *, reasoning: str | None = None, finish: str | None = None, role: bool = False
) -> dict:
    delta: dict = {}
    if role:
        delta["role"] = "assistant"
        delta["content"] = ""
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning"] = reasoning
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def usage(n: int, prompt: int = 7) -> dict:
    return {
        "id": "x",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n},
    }


def sse(obj: dict | str) -> bytes:
    payload = obj if isinstance(obj, str) else json.dumps(obj)
    return f"data: {payload}\n\n".encode()


def test_decoder_handles_split_events_and_several_per_read() -> None:
    stream = sse({"a": 1}) + sse({"b": 2}) + sse("[DONE]")
    decoder = SSEDecoder()
    out: list[bytes] = []
    # one byte at a time: every possible split point, including inside "data:" and inside the blank line
    for i in range(len(stream)):
        out += decoder.feed(stream[i : i + 1])
    assert out == [b'{"a": 1}', b'{"b": 2}', b"[DONE]"]
    assert SSEDecoder().feed(stream) == out  # all in one read


def test_decoder_comments_fields_crlf_and_multiline_data() -> None:
    raw = (
        b': ping\r\n\r\nevent: message\r\nid: 7\r\ndata: {"a":\r\ndata: 1}\r\n\r\nretry: 10\r\n\r\n'
        b":only a comment\n\ndata:[DONE]\n\n"
    )
    decoder = SSEDecoder()
    # split between CR and LF to exercise the held-back CR
    cut = raw.index(b"\r\n") + 1
    events = decoder.feed(raw[:cut]) + decoder.feed(raw[cut:])
    assert events == [b'{"a":\n1}', b"[DONE]"]


def test_decoder_keeps_unfinished_tail() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"half": ') == []
    assert decoder.pending == b'data: {"half": '


def test_stream_timestamps_usage_and_content() -> None:
    reads = [
        (1.0, sse(chunk(role=True))),  # role-only: not a token
        (1.1, sse(chunk("Hel")) + sse(chunk("lo"))),  # two events in one read share its time
        (1.2, sse(chunk(" world", finish="stop"))[:20]),  # half an event
        (1.3, sse(chunk(" world", finish="stop"))[20:] + sse(usage(5)) + sse("[DONE]")),
    ]
    reply = interpret_stream(reads)
    assert reply.error is None and reply.done
    assert reply.first_token_time == 1.1
    assert reply.last_token_time == 1.3  # completed by the later read
    assert reply.chunk_times == [1.1, 1.1, 1.3]
    assert reply.content == "Hello world"
    assert reply.usage == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    assert reply.finish_reason == "stop"


def test_reasoning_counts_as_first_token() -> None:
    reads = [(2.0, sse(chunk(reasoning="think"))), (2.5, sse(chunk("answer"))), (2.6, sse(usage(2)) + sse("[DONE]"))]
    reply = interpret_stream(reads)
    assert reply.first_token_time == 2.0 and reply.last_token_time == 2.5
    assert reply.reasoning == "think" and reply.content == "answer"
    legacy = {"choices": [{"delta": {"reasoning_content": "old field"}}]}
    assert interpret_stream([(3.0, sse(legacy) + sse(usage(1)) + sse("[DONE]"))]).first_token_time == 3.0


def test_usage_chunk_with_empty_choices_is_not_a_token() -> None:
    reads = [(1.0, sse(chunk("a"))), (9.0, sse(usage(1)) + sse("[DONE]"))]
    reply = interpret_stream(reads)
    assert reply.last_token_time == 1.0  # the late usage chunk does not stretch E2EL


def test_completions_text_and_tool_calls_are_tokens() -> None:
    text = {"choices": [{"index": 0, "text": "abc", "finish_reason": None}]}
    tool = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}
    reply = interpret_stream([(1.0, sse(text)), (2.0, sse(tool)), (3.0, sse("[DONE]"))])
    assert reply.chunk_times == [1.0, 2.0]


def test_events_after_done_are_ignored() -> None:
    reply = interpret_stream([(1.0, sse(chunk("a")) + sse("[DONE]") + sse(chunk("late")) + b"garbage")])
    assert reply.error is None and reply.content == "a"


@pytest.mark.parametrize(
    ("reads", "reason"),
    [
        ([(1.0, sse(chunk("a")))], TRUNCATED_STREAM),
        ([(1.0, sse(chunk("a")) + b'data: {"cut": ')], TRUNCATED_STREAM),
        ([(1.0, sse(chunk("a")) + b"data: {not json}\n\n" + sse("[DONE]"))], MALFORMED_SSE),
        ([(1.0, sse(chunk("a")) + sse("[1, 2]") + sse("[DONE]"))], MALFORMED_SSE),
        ([(1.0, sse({"error": {"message": "engine died", "code": 500}}) + sse("[DONE]"))], SERVER_ERROR_EVENT),
        ([(1.0, sse(chunk(role=True)) + sse(usage(0)) + sse("[DONE]"))], EMPTY_RESPONSE),
        ([(1.0, sse({"choices": [{"delta": "not an object"}]}) + sse("[DONE]"))], MALFORMED_SSE),
    ],
    ids=["no-done", "half-event", "not-json", "not-object", "error-event", "no-tokens", "bad-delta"],
)
def test_broken_streams_are_failures_with_a_reason(reads: list, reason: str) -> None:
    reply = interpret_stream(reads)
    assert reply.error == reason
    assert reply.error_detail


def test_malformed_event_keeps_tokens_seen_before_it() -> None:
    reply = interpret_stream([(1.0, sse(chunk("a")) + sse(chunk("b")) + b"data: {oops\n\n")])
    assert reply.error == MALFORMED_SSE
    assert reply.chunk_times == [1.0, 1.0]


def test_non_stream_body() -> None:
    body = {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi", "reasoning": "r"}, "finish_reason": "length"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    reply = interpret_body(json.dumps(body).encode())
    assert (
        reply.error is None
        and reply.content == "hi"
        and reply.reasoning == "r"
        and reply.usage["completion_tokens"] == 4
    )
    assert interpret_body(b"<html>").error == BAD_RESPONSE
    assert interpret_body(b'{"error": {"message": "x"}}').error == SERVER_ERROR_EVENT
    assert interpret_body(b'{"choices": []}').error == BAD_RESPONSE
