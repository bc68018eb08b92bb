"""End to end on real vLLM (CPU build): serve.sh starts the demo, the OpenAI API answers, DFlash drafts tokens
that the target accepts, and speculative decoding changes no output token at temperature 0."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

pytestmark = pytest.mark.server

PROMPTS = [
    "Hello! Who are you?",
    "Write a short poem about the sea.",
    "Explain speculative decoding in one sentence.",
    "List three prime numbers.",
    "What is the capital of France?",
    "Translate 'good morning' into German.",
    "def fibonacci(n):",
    "Tell me a story about a robot.",
]


def post(url: str, body: dict[str, object], timeout: float = 300) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def chat(server, prompt: str, max_tokens: int = 48) -> dict:  # type: ignore[no-untyped-def]
    return post(f"{server.base_url}/v1/chat/completions", {
        "model": server.model, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "temperature": 0, "return_token_ids": True})


def counter(metrics: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus counter's samples whose labels include `labels`."""
    total = 0.0
    for line in metrics.splitlines():
        match = re.match(rf"^{re.escape(name)}(?:{{(.*)}})?\s+(\S+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total


def test_models_endpoint_lists_the_served_name(demo_server) -> None:  # type: ignore[no-untyped-def]
    models = json.loads(get(f"{demo_server.base_url}/v1/models"))
    assert [m["id"] for m in models["data"]] == [demo_server.model]


def test_chat_completion(demo_server) -> None:  # type: ignore[no-untyped-def]
    reply = chat(demo_server, PROMPTS[0])
    choice = reply["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"]
    assert reply["usage"]["completion_tokens"] == len(choice["token_ids"]) > 0


def test_streaming_chat_completion(demo_server) -> None:  # type: ignore[no-untyped-def]
    request = urllib.request.Request(
        f"{demo_server.base_url}/v1/chat/completions",
        data=json.dumps({"model": demo_server.model, "messages": [{"role": "user", "content": PROMPTS[1]}],
                         "max_tokens": 32, "temperature": 0, "stream": True,
                         "stream_options": {"include_usage": True}}).encode(),
        headers={"Content-Type": "application/json"})
    pieces, usage, done = [], None, False
    with urllib.request.urlopen(request, timeout=300) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            payload = line[len("data: "):]
            if payload == "[DONE]":
                done = True
                break
            event = json.loads(payload)
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices", []):
                pieces.append(choice.get("delta", {}).get("content") or "")
    assert done and usage is not None
    assert usage["completion_tokens"] > 0
    streamed = "".join(pieces)
    assert streamed == chat(demo_server, PROMPTS[1], max_tokens=32)["choices"][0]["message"]["content"]


def test_dflash_drafts_are_accepted(demo_server) -> None:  # type: ignore[no-untyped-def]
    before = get(demo_server.metrics_url)
    for prompt in PROMPTS[:4]:
        chat(demo_server, prompt, max_tokens=64)
    after = get(demo_server.metrics_url)

    def delta(name: str, **labels: str) -> float:
        return counter(after, name, **labels) - counter(before, name, **labels)

    drafts = delta("vllm:spec_decode_num_drafts_total")
    drafted = delta("vllm:spec_decode_num_draft_tokens_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and drafted > 0
    assert accepted > 0, "the demo drafter must agree with its target sometimes"
    assert accepted <= drafted
    first_position = delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", position="0")
    assert 0 < first_position <= drafts


def test_dflash_output_is_token_identical_to_plain_decoding(demo_server, baseline_demo_server) -> None:  # type: ignore[no-untyped-def]
    for prompt in PROMPTS:
        speculative = chat(demo_server, prompt, max_tokens=64)["choices"][0]["token_ids"]
        plain = chat(baseline_demo_server, prompt, max_tokens=64)["choices"][0]["token_ids"]
        assert speculative == plain, f"outputs differ for {prompt!r}"


def test_baseline_does_no_speculation(baseline_demo_server) -> None:  # type: ignore[no-untyped-def]
    chat(baseline_demo_server, PROMPTS[2])
    metrics = get(baseline_demo_server.metrics_url)
    assert counter(metrics, "vllm:spec_decode_num_drafts_total") == 0
