"""A warmup in which every request failed names the cause the failures point to, not always --model; text that
cannot be sent as UTF-8 is refused when read (dataset, command line) and never crashes a run (server replies)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_helpers import bench_in_process
from kimi_dflash.bench import client, failure_hints
from kimi_dflash.bench.response import Reply
from synthetic_server import running

FAST = ["--ttft-ms", "5", "--chunk-interval-ms", "1"]
VLLM_CONTEXT_400 = (
    'HTTP 400 Bad Request: {"error": {"message": "This model\'s maximum context length is 1024 tokens. However, '
    'you requested 1500 tokens", "type": "BadRequestError"}}'
)


@pytest.mark.parametrize(
    ("reason", "detail", "expected"),
    [
        ("http_400", VLLM_CONTEXT_400, "longer than the model's context: lower --max-tokens"),
        ("http_400", "HTTP 400 Bad Request: The decoder prompt (length 90) is longer than the maximum model length",
         "longer than the model's context"),
        ("http_400", 'HTTP 400 Bad Request: {"error": "top_k must be -1"}', "invalid: check --extra-body"),
        ("http_401", "HTTP 401 Unauthorized: ", "wants an API key: pass --api-key"),
        ("connection_refused", "ConnectionRefusedError: [Errno 111] Connect call failed",
         "stopped answering during the warmup"),
        ("client_error", "UnicodeEncodeError: 'utf-8' codec can't encode character", "raised on this machine"),
        ("client_out_of_resources", "OSError: [Errno 24] Too many open files", "this machine ran out"),
        ("http_404", 'HTTP 404 Not Found: {"error": "model not found"}', "check --model"),
    ],
)  # fmt: skip
def test_each_cause_gets_its_own_hint(reason: str, detail: str, expected: str) -> None:
    message = failure_hints.warmup_failed(4, {reason: 4}, {reason: detail}, "kimi")
    assert expected in message and f"all 4 warmup requests failed ({reason}" in message
    if reason != "http_404":
        assert "--model" not in message  # only a missing model is blamed on --model


def test_the_most_common_reason_decides() -> None:
    failures = {"connection_reset": 1, "http_401": 3}
    examples = {"connection_reset": "reset", "http_401": "HTTP 401"}
    assert "API key" in failures_hint(failures, examples)


def failures_hint(failures: dict[str, int], examples: dict[str, str]) -> str:
    return failure_hints.warmup_failed(sum(failures.values()), failures, examples, "m")


def test_a_failed_warmup_against_a_real_server_names_the_server_not_the_model(tmp_path: Path) -> None:
    with running([*FAST, "--faults", "http_500"]) as url:
        proc = bench_in_process(
            "--base-url",
            url,
            "--output",
            str(tmp_path / "o.json"),
            "--sessions",
            "1",
            "--warmup",
            "2",
            "--turns-per-session",
            "1",
            "--max-tokens",
            "4",
        )
    assert proc.returncode == 2
    assert "the server failed while answering: read the server log" in proc.stderr
    assert "check --model" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_dataset_text_that_cannot_be_sent_is_refused_when_read(tmp_path: Path) -> None:
    dataset = tmp_path / "lone.jsonl"
    dataset.write_text('{"prompt": "fine"}\n{"prompt": "half a pair \\ud800 here"}\n', encoding="utf-8")
    proc = bench_in_process(
        "--base-url", "http://127.0.0.1:9", "--dataset", str(dataset), "--output", str(tmp_path / "o.json")
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"dataset {dataset}: prompt line-2 holds a lone surrogate (U+D800)" in proc.stderr


def test_command_line_text_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    proc = bench_in_process(
        "--base-url", "http://127.0.0.1:9", "--system-prompt", "caf\udce9", "--output", str(tmp_path / "o.json")
    )
    assert proc.returncode == 2 and "--system-prompt holds bytes that are not UTF-8" in proc.stderr
    proc = bench_in_process(
        "--base-url", "http://127.0.0.1:9", "--extra-body", '{"x": "\\ud800"}', "--output", str(tmp_path / "o.json")
    )
    assert proc.returncode == 2 and "--extra-body: holds a lone surrogate" in proc.stderr


def test_a_server_reply_with_a_lone_surrogate_is_carried_and_hashed_without_a_crash() -> None:
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "half \ud83d"}]
    body = client.request_payload("m", {"messages": history}, 8, 0.0, True, False, None)
    assert json.loads(body)["messages"][1]["content"] == "half \ud83d"  # sent escaped, as the server wrote it
    text_hash, _ = client.reply_hashes(Reply(content="half \ud83d"))
    assert len(text_hash) == 64
