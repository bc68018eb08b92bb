"""Per-request acceptance (vLLM's metrics.speculative_decoding): parsing, the level table, and the truth.

The synthetic server counts each reply's verify steps into its /metrics counters and, with
--per-request-spec-metrics, reports the same steps on the reply; the benchmark's per-request sums over a
level must equal the counter deltas it scraped around that level, exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_helpers import bench_in_process, interpret_stream
from kimi_dflash.bench import spec_request
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.response import interpret_body
from kimi_dflash.bench.result import LevelResult, SpecGroup, load_result
from kimi_dflash.bench.spec_summary import reply_hashes, spec_per_request
from synthetic_server import running

# What vLLM 0.32 (CPU demo, --per-request-spec-decode-metrics detailed) returned for one request, verbatim.
VLLM_032_BLOCK = {
    "speculative_decoding": {
        "mean_acceptance_length": 4.5,
        "draft_acceptance_rate": 0.875,
        "acceptance_histogram": [0, 1, 0, 0, 5],
        "num_spec_steps": 6,
        "num_accepted_draft_tokens": 21,
        "num_draft_tokens": 24,
        "num_spec_tokens": 4,
        "per_step_accepted": [1, 4, 4, 4, 4, 4],
        "per_step_drafted": [4, 4, 4, 4, 4, 4],
    }
}


def test_parse_reads_vllm_shape_and_per_position_from_the_histogram() -> None:
    spec = spec_request.parse(VLLM_032_BLOCK)
    assert spec is not None
    assert (spec.num_spec_steps, spec.num_accepted_draft_tokens, spec.num_draft_tokens) == (6, 21, 24)
    # position k is accepted by every step that accepted more than k tokens
    assert spec.accepted_per_position() == [6, 5, 5, 5]
    assert sum(spec.accepted_per_position()) == spec.num_accepted_draft_tokens
    assert spec.per_step_accepted == [1, 4, 4, 4, 4, 4]
    assert spec_request.parse({"time_to_first_token_ms": None}) is None
    assert spec_request.parse({"speculative_decoding": {"num_spec_steps": "6"}}) is None
    assert spec_request.parse(None) is None


def test_stream_takes_the_block_from_the_final_usage_chunk() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": " hi"}, "finish_reason": None}]}
    final = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 24}, "metrics": VLLM_032_BLOCK}
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in (chunk, final)) + b"data: [DONE]\n\n"
    reply = interpret_stream([(1.0, body)])
    assert reply.error is None and reply.metrics == VLLM_032_BLOCK
    plain = {"choices": [{"message": {"content": "x"}, "token_ids": [5, 6]}], "metrics": VLLM_032_BLOCK}
    reply = interpret_body(json.dumps(plain).encode())
    assert reply.metrics == VLLM_032_BLOCK and reply.token_ids == [5, 6]


def test_stream_collects_token_ids_on_the_fast_path_too() -> None:
    events = [
        {"choices": [{"index": 0, "delta": {"content": " a"}, "finish_reason": None, "token_ids": [7, 8]}]},
        {"choices": [{"index": 0, "delta": {"content": " b"}, "finish_reason": None, "token_ids": [9]}]},
    ]
    reads = [(float(i), b"data: " + json.dumps(e).encode() + b"\n\n") for i, e in enumerate(events)]
    reply = interpret_stream([*reads, (3.0, b"data: [DONE]\n\n")])
    assert reply.token_ids == [7, 8, 9] and reply.content == " a b" and reply.token_chunks == 2


def _record(turn: int, category: str, prompt_tokens: int, steps: list[int], k: int = 2) -> RequestRecord:
    record = RequestRecord(sessions=1, repeat=0, session=0, turn=turn, category=category)
    record.prompt_tokens = prompt_tokens
    hist = [0] * (k + 1)
    for n in steps:
        hist[n] += 1
    record.spec = spec_request.RequestSpec(
        num_spec_tokens=k,
        num_spec_steps=len(steps),
        num_accepted_draft_tokens=sum(steps),
        num_draft_tokens=k * len(steps),
        mean_acceptance_length=0.0,  # the table recomputes from counts, never trusts the float
        draft_acceptance_rate=0.0,
        acceptance_histogram=hist,
    )
    record.reply_sha256 = f"h{turn}{category}"
    return record


def _sums(rows: list[SpecGroup]) -> tuple[int, int, int, int]:
    return (
        sum(r.requests for r in rows),
        sum(r.spec_steps for r in rows),
        sum(r.accepted_tokens for r in rows),
        sum(r.draft_tokens for r in rows),
    )


def test_level_table_pools_counts_and_every_breakdown_sums_to_the_total() -> None:
    records = [
        _record(1, "code", 100, [2, 2, 1]),
        _record(2, "code", 700, [0, 1]),
        _record(1, "math", 300, [2]),
        _record(2, "math", 5000, [0, 0, 0, 2]),
    ]
    failed = RequestRecord(sessions=1, repeat=0, session=1, turn=1, error="timeout")
    table = spec_per_request([*records, failed])
    assert table is not None
    total = table.total
    assert (total.requests, total.spec_steps, total.accepted_tokens, total.draft_tokens) == (4, 10, 10, 20)
    assert total.acceptance_length == pytest.approx(2.0) and total.acceptance_rate == pytest.approx(0.5)
    # per-request τ: 1 + 5/3, 1 + 1/2, 1 + 2/1, 1 + 2/4
    assert total.acceptance_length_dist.mean == pytest.approx((8 / 3 + 1.5 + 3 + 1.5) / 4)
    assert table.per_position == pytest.approx([6 / 10, 4 / 10])
    for rows in (table.per_turn, table.per_category, table.per_prompt_length):
        assert _sums(rows) == (4, 10, 10, 20)
    assert [r.key for r in table.per_prompt_length] == ["0-127", "256-511", "512-1023", "4096-8191"]
    assert [r.key for r in table.per_turn] == ["1", "2"]
    assert spec_per_request([failed]) is None


def test_reply_hashes_are_keyed_by_each_sessions_request_order() -> None:
    a = _record(1, "code", 1, [1])
    b = _record(2, "code", 1, [1])
    other = RequestRecord(sessions=2, repeat=0, session=1, turn=1)
    other.reply_sha256 = "z"
    assert reply_hashes([a, other, b]) == {"0/0/0": a.reply_sha256, "0/1/0": "z", "0/0/1": b.reply_sha256}


# -- against the synthetic server's counters ---------------------------------------------------------------------


def _check_against_counters(level: LevelResult) -> None:
    table, counters = level.spec_per_request, level.spec_decode
    assert table is not None and counters is not None, level.spec_decode_status
    assert table.requests_without == 0 and table.total.requests == level.completed
    assert table.total.spec_steps == counters.drafts
    assert table.total.accepted_tokens == counters.accepted_tokens
    assert table.total.draft_tokens == counters.draft_tokens
    assert table.per_position == pytest.approx(counters.per_position, abs=1e-12)
    assert table.total.acceptance_length == pytest.approx(counters.acceptance_length, abs=1e-12)
    for rows in (table.per_turn, table.per_category, table.per_prompt_length):
        assert _sums(rows) == (level.completed, counters.drafts, counters.accepted_tokens, counters.draft_tokens)


@pytest.mark.parametrize("stream", [True, False])
def test_per_request_sums_equal_the_servers_counter_deltas(tmp_path: Path, stream: bool) -> None:
    args = ["--ttft-ms", "5", "--chunk-interval-ms", "2", "--chunk-tokens", "4,1,3,2,4"]
    args += ["--spec-tokens", "3", "--per-request-spec-metrics", "detailed"]
    out = tmp_path / "r.json"
    with running(args) as url:
        proc = bench_in_process(
            "--base-url",
            url,
            "--sessions",
            "2,3",
            "--turns-per-session",
            "3",
            "--max-tokens",
            "17",
            "--warmup",
            "2",
            "--output",
            str(out),
            "--progress-interval",
            "0",
            *([] if stream else ["--no-stream"]),
        )
    assert proc.returncode == 0, proc.stderr
    result = load_result(out)
    for level in result.results:
        _check_against_counters(level)
        assert level.reply_hashes is not None and len(level.reply_hashes) == level.completed
    assert "per-request acceptance" in proc.stdout


def test_without_per_request_metrics_the_block_is_absent(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    with running(["--ttft-ms", "5", "--chunk-interval-ms", "2", "--chunk-tokens", "2", "--spec-tokens", "2"]) as url:
        proc = bench_in_process(
            "--base-url",
            url,
            "--sessions",
            "2",
            "--turns-per-session",
            "2",
            "--max-tokens",
            "8",
            "--warmup",
            "0",
            "--output",
            str(out),
            "--progress-interval",
            "0",
        )
    assert proc.returncode == 0, proc.stderr
    document = json.loads(out.read_text())
    assert "spec_per_request" not in document["results"][0]
    assert document["results"][0]["spec_decode"]["drafts"] > 0
