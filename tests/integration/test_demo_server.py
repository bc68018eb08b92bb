"""End to end on real vLLM (CPU build): serve.sh starts the demo (the miniature Kimi K2.6), the OpenAI API answers,
DFlash drafts tokens that the target accepts, speculative decoding changes no output token at temperature 0, and
vLLM's MLA + MoE compute what transformers computes on the same checkpoint."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from kimi_dflash.config.validate import load_config

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
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def chat(server, prompt: str, max_tokens: int = 48) -> dict:  # type: ignore[no-untyped-def]
    return post(
        f"{server.base_url}/v1/chat/completions",
        {
            "model": server.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "return_token_ids": True,
        },
    )


def counter(metrics: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus counter's samples whose labels include `labels`."""
    total = 0.0
    for line in metrics.splitlines():
        match = re.match(rf"^{re.escape(name)}(?:{{(.*)}})?\s+(\S+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total


def served_model_dir(server) -> Path:  # type: ignore[no-untyped-def]
    """The checkpoint directory vLLM serves (/v1/models reports it as the model's root)."""
    return Path(json.loads(get(f"{server.base_url}/v1/models"))["data"][0]["root"])


def test_models_endpoint_lists_the_served_name(demo_server) -> None:  # type: ignore[no-untyped-def]
    models = json.loads(get(f"{demo_server.base_url}/v1/models"))
    assert [m["id"] for m in models["data"]] == [demo_server.model]


def test_the_demo_serves_a_kimi_architecture_model(demo_server) -> None:  # type: ignore[no-untyped-def]
    config = json.loads((served_model_dir(demo_server) / "config.json").read_text())
    assert config["architectures"] == ["KimiK25ForConditionalGeneration"]
    assert config["text_config"]["kv_lora_rank"] == 512 and config["text_config"]["n_routed_experts"] > 1


def test_chat_completion(demo_server) -> None:  # type: ignore[no-untyped-def]
    reply = chat(demo_server, PROMPTS[0])
    choice = reply["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"]
    assert reply["usage"]["completion_tokens"] == len(choice["token_ids"]) > 0


def test_streaming_chat_completion(demo_server) -> None:  # type: ignore[no-untyped-def]
    request = urllib.request.Request(
        f"{demo_server.base_url}/v1/chat/completions",
        data=json.dumps(
            {
                "model": demo_server.model,
                "messages": [{"role": "user", "content": PROMPTS[1]}],
                "max_tokens": 32,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    pieces, usage, done = [], None, False
    with urllib.request.urlopen(request, timeout=300) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            payload = line[len("data: ") :]
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
    k = load_config(demo_server.config_path, environ={}).typed.num_speculative_tokens
    assert drafts > 0 and drafted == k * drafts
    assert accepted <= drafted
    assert accepted / drafted >= 0.5, f"acceptance {accepted}/{drafted} at {k} speculative tokens"
    per_position = [delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i)) for i in range(k)]
    assert sum(per_position) == accepted
    assert per_position == sorted(per_position, reverse=True) and per_position[-1] > 0  # decays like a real drafter


def test_dflash_output_is_token_identical_to_plain_decoding(demo_server, baseline_demo_server) -> None:  # type: ignore[no-untyped-def]
    for prompt in PROMPTS:
        speculative = chat(demo_server, prompt, max_tokens=64)["choices"][0]["token_ids"]
        plain = chat(baseline_demo_server, prompt, max_tokens=64)["choices"][0]["token_ids"]
        assert speculative == plain, f"outputs differ for {prompt!r}"


def test_baseline_does_no_speculation(baseline_demo_server) -> None:  # type: ignore[no-untyped-def]
    chat(baseline_demo_server, PROMPTS[2])
    metrics = get(baseline_demo_server.metrics_url)
    assert counter(metrics, "vllm:spec_decode_num_drafts_total") == 0


def test_vllm_computes_what_transformers_computes(baseline_demo_server) -> None:  # type: ignore[no-untyped-def]
    """vLLM-CPU's MLA attention and Kimi-routed MoE against transformers' DeepSeek-V3 on the same checkpoint, both
    float32: every top-5 logprob agrees. (Routing mistakes move logprobs by > 0.1: lab/tests/test_kimi_agreement.py.)"""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kimi_dflash.drafter_training.features import load_kimi_text_model

    model = load_kimi_text_model(served_model_dir(baseline_demo_server))
    worst = 0.0
    for prompt in PROMPTS[:3]:
        reply = post(
            f"{baseline_demo_server.base_url}/v1/chat/completions",
            {
                "model": baseline_demo_server.model,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 6,
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": 5,
                "return_token_ids": True,
                "return_tokens_as_token_ids": True,
            },
        )
        prompt_ids, generated = reply["prompt_token_ids"], reply["choices"][0]["token_ids"]
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([prompt_ids + generated])).logits[0].double(), dim=-1)
        for step, item in enumerate(reply["choices"][0]["logprobs"]["content"]):
            position = len(prompt_ids) - 1 + step
            for candidate in item["top_logprobs"]:
                token_id = int(candidate["token"].removeprefix("token_id:"))
                worst = max(worst, abs(candidate["logprob"] - float(logprobs[position, token_id])))
    assert worst < 0.01  # measured: 3e-4
