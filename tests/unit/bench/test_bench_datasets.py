"""Conversation datasets (OpenAI messages, ShareGPT, SPEED-Bench) and the shared prefix: what sessions send."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bench_helpers import bench_in_process
from kimi_dflash.bench.result import load_result
from kimi_dflash.bench.workload import load_dataset, session_prompts
from kimi_dflash.core.errors import UserError
from repo_paths import REPO_ROOT
from synthetic_server import running

DATA = REPO_ROOT / "tests" / "data"
OPENAI = DATA / "conversations.openai.jsonl"
SHAREGPT = DATA / "conversations.sharegpt.json"
SPEED = DATA / "speed-bench.jsonl"


@pytest.mark.parametrize(("path", "fmt"), [(OPENAI, "openai-messages"), (SHAREGPT, "sharegpt"), (SPEED, "speed-bench")])
def test_formats_are_detected_and_only_user_turns_are_kept(path: Path, fmt: str) -> None:
    dataset = load_dataset(str(path))
    info = dataset.describe()
    assert info.format == fmt and info.conversations == 4
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info.categories == {"code": 2, "math": 1, "writing": 1}
    assert not any("recorded" in p.text for p in dataset.prompts)  # assistant turns are generated, not replayed
    first = dataset.conversations[0]
    assert first.turns[0] == "Write a Python function that reverses a linked list."
    assert first.system == ("You are a concise assistant." if fmt == "openai-messages" else None)
    assert load_dataset(str(path), fmt).describe() == info


def test_sessions_replay_whole_conversations_and_start_the_next_one() -> None:
    dataset = load_dataset(str(SPEED))  # conversations of 1, 2, 3, 1 user turns
    plan = session_prompts(dataset, seed=0, level=2, repeat=0, session=0, turns=5)
    assert len(plan) == 5
    # turn numbers restart at 1 exactly where a conversation starts, and a conversation's turns stay in order
    for prev, cur in zip(plan, plan[1:]):
        assert cur.conversation_turn == 1 or (cur.id == prev.id and cur.conversation_turn == prev.conversation_turn + 1)
    by_id = {c.id: c.turns for c in dataset.conversations}
    assert all(p.text == by_id[p.id][p.conversation_turn - 1] for p in plan)
    assert plan == session_prompts(dataset, seed=0, level=2, repeat=0, session=0, turns=5)  # same seed, same plan
    sequential = session_prompts(dataset, 0, 2, 0, 1, 3, order="sequential")
    assert [p.id for p in sequential][0] == "q1"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": [{"role": "user"}]}\n', "line 2"),
        ('{"conversations": [{"from": "gpt", "value": "only a reply"}]}\n', "line 1"),
        ('{"turns": ["a"]}\n\n{"turns": "b"}\n', "line 3"),
        ('{"turns": ["a"]}\n{oops\n', "line 2: not valid JSON"),
        ('[{"conversations": [{"from": "human", "value": "a"}]}, 3]', "item 1"),
    ],
)
def test_malformed_records_name_file_and_line(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_dataset(str(path))
    assert str(path) in str(info.value) and where in str(info.value)


def test_cli_runs_a_conversation_dataset_with_a_shared_prefix(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    with running(
        [
            "--ttft-ms",
            "5",
            "--chunk-interval-ms",
            "1",
            "--spec-tokens",
            "2",
            "--chunk-tokens",
            "3,1",
            "--per-request-spec-metrics",
            "summary",
        ]
    ) as url:
        proc = bench_in_process(
            "--base-url",
            url,
            "--dataset",
            str(OPENAI),
            "--sessions",
            "2",
            "--turns-per-session",
            "3",
            "--max-tokens",
            "10",
            "--warmup",
            "0",
            "--shared-prefix-tokens",
            "200",
            "--output",
            str(out),
            "--progress-interval",
            "0",
            "--record-requests",
        )
    assert proc.returncode == 0, proc.stderr
    result = load_result(out)
    assert result.settings.dataset is not None and result.settings.dataset.format == "openai-messages"
    assert result.settings.shared_prefix_tokens == 200
    level = result.results[0]
    assert level.request_records is not None
    records = level.request_records.records
    # The synthetic server counts words: the ~800-character prefix is ~130 words in every turn-1 prompt.
    assert all(r.prompt_tokens and r.prompt_tokens > 100 for r in records)
    # A conversation's prompt grows turn over turn: it carries the served replies.
    for session in (0, 1):
        counts = [r.prompt_tokens for r in records if r.session == session]
        assert counts == sorted(counts) and len(set(counts)) == 3, counts
    assert {r.category for r in records} <= {"code", "math", "writing"}
    table = level.spec_per_request
    assert table is not None and sum(r.requests for r in table.per_category) == level.completed


def test_unknown_dataset_format_is_refused(tmp_path: Path) -> None:
    proc = bench_in_process("--dataset", str(OPENAI), "--dataset-format", "csv")
    assert proc.returncode == 2 and "--dataset-format" in proc.stderr
    bad = tmp_path / "x.jsonl"
    bad.write_text(json.dumps({"messages": "nope"}) + "\n")
    proc = bench_in_process("--dataset", str(bad), "--base-url", "http://127.0.0.1:9")
    assert proc.returncode == 2 and f"{bad} line 1" in proc.stderr and "Traceback" not in proc.stderr
