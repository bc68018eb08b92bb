"""--extra-body, --header and --endpoint: what reaches the request, and what never reaches the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_helpers import bench_in_process, run_benchmark
from kimi_dflash.bench import request_shaping
from kimi_dflash.bench.client import Endpoint, request_payload
from kimi_dflash.bench.report import redact_argv
from kimi_dflash.core.errors import UserError
from synthetic_server import running

SECRET = "s3cr3t-value-that-must-not-leak"


def test_extra_body_is_merged_and_cannot_override_what_the_flags_set() -> None:
    extra = request_shaping.parse_extra_body('{"chat_template_kwargs": {"thinking": false}, "top_p": 0.9}')
    messages = {"messages": [{"role": "user", "content": "x"}]}
    body = json.loads(request_payload("m", messages, 8, 0.0, True, extra_body=extra))
    assert body["chat_template_kwargs"] == {"thinking": False} and body["top_p"] == 0.9
    assert body["max_tokens"] == 8 and body["stream_options"] == {"include_usage": True}
    # stream_options is merged: the usage chunk (the token count) stays on
    merged = json.loads(
        request_payload(
            "m", {"prompt": "p"}, 8, 0.0, True, extra_body={"stream_options": {"continuous_usage_stats": True}}
        )
    )
    assert merged["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}
    assert merged["prompt"] == "p" and "messages" not in merged
    for bad, word in (('{"max_tokens": 5}', "--max-tokens"), ("[1]", "JSON object"), ("{nope", "not valid JSON")):
        with pytest.raises(UserError, match=word):
            request_shaping.parse_extra_body(bad)


def test_extra_body_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "body.json"
    path.write_text('{"top_k": 5}')
    assert request_shaping.parse_extra_body(f"@{path}") == {"top_k": 5}
    with pytest.raises(UserError, match="--extra-body file .*missing.json: no such file"):
        request_shaping.parse_extra_body(f"@{tmp_path / 'missing.json'}")


def test_headers_parse_and_credentials_are_redacted() -> None:
    assert request_shaping.parse_header("X-Tenant: blue") == ("X-Tenant", "blue")
    for name in ("Authorization", "x-api-key", "X-Auth-Token", "Cookie", "My-Secret"):
        assert request_shaping.is_credential(name)
        assert request_shaping.shown_header(name, SECRET) == f"{name}: ***"
    assert not request_shaping.is_credential("X-Tenant")
    with pytest.raises(UserError) as info:
        request_shaping.parse_header(f"Bad Name: {SECRET}")
    assert SECRET not in str(info.value)
    argv = ["b", "--header", f"Authorization: Bearer {SECRET}", f"--header=x-api-key:{SECRET}", "--header", "A: b"]
    shown = " ".join(redact_argv(argv))
    assert SECRET not in shown and "A: b" in shown and "Authorization: ***" in shown
    endpoint = Endpoint("http://h", extra_headers=(("X-Tenant", "blue"),))
    assert endpoint.chat_headers["X-Tenant"] == "blue" and SECRET not in repr(Endpoint("http://h", api_key=SECRET))


def test_a_credential_header_authenticates_and_is_never_stored_or_printed(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    with running(["--ttft-ms", "5", "--chunk-interval-ms", "2", "--api-key", SECRET]) as url:
        proc = run_benchmark(
            "--base-url", url, "--sessions", "2", "--turns-per-session", "2", "--max-tokens", "6", "--warmup", "1",
            "--metrics-url", "none", "--header", f"Authorization: Bearer {SECRET}", "--header", "X-Tenant: blue",
            "--extra-body", '{"top_p": 0.5}', "--output", str(out), "--progress-interval", "0",
        )  # fmt: skip
    # The synthetic server refuses every request without "Authorization: Bearer <key>": the header was sent.
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert SECRET not in text and SECRET not in proc.stdout and SECRET not in proc.stderr
    settings = json.loads(text)["settings"]
    assert settings["headers"] == ["Authorization: ***", "X-Tenant: blue"]
    assert settings["extra_body"] == {"top_p": 0.5} and settings["endpoint"] == "chat"
    assert json.loads(text)["results"][0]["completed"] == 4


def test_completions_endpoint_sends_each_turn_as_a_prompt(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    with running(["--ttft-ms", "5", "--chunk-interval-ms", "2"]) as url:
        proc = bench_in_process(
            "--base-url",
            url,
            "--sessions",
            "2",
            "--turns-per-session",
            "2",
            "--max-tokens",
            "6",
            "--warmup",
            "0",
            "--endpoint",
            "completions",
            "--output",
            str(out),
            "--progress-interval",
            "0",
        )
    assert proc.returncode == 0, proc.stderr
    document = json.loads(out.read_text())
    assert document["settings"]["endpoint"] == "completions" and document["settings"]["independent_turns"] is True
    assert document["results"][0]["completed"] == 4 and document["results"][0]["output_tokens"] == 24
    with running(["--ttft-ms", "5"]) as url:
        bad = bench_in_process("--base-url", url, "--endpoint", "completions", "--system-prompt", "x")
    assert bad.returncode == 2 and "--endpoint chat" in bad.stderr


def test_secret_query_parameters_are_redacted() -> None:
    from kimi_dflash.core.redaction import redact_query

    assert redact_query(f"http://h/metrics?api_key={SECRET}&job=vllm") == "http://h/metrics?api_key=***&job=vllm"
    assert redact_query(f"http://h/m?a=1&access_token={SECRET}#x") == "http://h/m?a=1&access_token=***#x"
    assert redact_query("http://h/metrics?job=vllm&page=2") == "http://h/metrics?job=vllm&page=2"


def test_a_key_in_the_metrics_url_query_never_reaches_the_result(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    with running(["--ttft-ms", "5", "--chunk-interval-ms", "1"]) as url:
        # a path the server does not serve: the failed scrape's message quotes the URL too
        proc = run_benchmark("--base-url", url, "--metrics-url", f"{url}/no-metrics?token={SECRET}&job=vllm",
                             "--sessions", "1", "--turns-per-session", "1", "--max-tokens", "4", "--warmup", "0",
                             "--output", str(out), timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    stored = out.read_text()
    assert SECRET not in stored + proc.stdout + proc.stderr
    document = json.loads(stored)
    assert document["settings"]["metrics_url"] == f"{url}/no-metrics?token=***&job=vllm"
    assert document["server"]["metrics_error"] and "token=***" in document["server"]["metrics_error"]
    assert "token=***" in " ".join(document["run"]["command_line"])
