"""Per-request acceptance and reply identity on the real vLLM CPU demo (issue 21's server checks).

1. DFlash demo with PER_REQUEST_SPEC_METRICS=detailed (the session's demo server), a conversation fixture:
   Σ per-request accepted tokens, verify steps and draft tokens over the measured window equal the /metrics
   counter deltas; per-category, per-turn and per-prompt-length rows sum to the window total; a conversation's
   prompt grows turn over turn.
2. The autoregressive demo (demo-cpu-baseline.env) on the same conversations at temperature 0: compare states
   that 100 % of the served replies are identical (sha256). The second is the session's baseline server (shared with
   the other modules that use it: tests/conftest.py sends them to one worker).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_helpers import run_benchmark, run_compare
from kimi_dflash.bench.reply_match import match_level
from kimi_dflash.bench.result import load_result
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.server

FIXTURE = REPO_ROOT / "tests" / "data" / "conversations.openai.jsonl"
WORKLOAD = ("--dataset", str(FIXTURE), "--sessions", "3", "--turns-per-session", "3", "--max-tokens", "24",
            "--temperature", "0", "--warmup", "2", "--progress-interval", "0")  # fmt: skip


def _run(server, out: Path, label: str) -> None:  # type: ignore[no-untyped-def]
    proc = run_benchmark(
        "--base-url", server.base_url, "--model", server.model, "--metrics-url", server.metrics_url,
        *WORKLOAD, "--label", label, "--record-requests", "--output", str(out), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_per_request_sums_equal_metrics_and_dflash_replies_equal_the_baseline(  # type: ignore[no-untyped-def]
    demo_server, baseline_demo_server, tmp_path: Path
) -> None:
    assert demo_server.env["PER_REQUEST_SPEC_METRICS"] == "detailed"
    _run(demo_server, tmp_path / "dflash.json", "dflash")

    level = load_result(tmp_path / "dflash.json").results[0]
    counters, table = level.spec_decode, level.spec_per_request
    assert level.completed == 9 and level.failed == 0
    assert counters is not None and table is not None and table.requests_without == 0
    assert table.total.spec_steps == counters.drafts > 0
    assert table.total.accepted_tokens == counters.accepted_tokens
    assert table.total.draft_tokens == counters.draft_tokens
    assert table.per_position == pytest.approx(counters.per_position, abs=1e-12)
    for rows in (table.per_category, table.per_turn, table.per_prompt_length):
        assert sum(r.accepted_tokens for r in rows) == counters.accepted_tokens
        assert sum(r.spec_steps for r in rows) == counters.drafts
        assert sum(r.requests for r in rows) == level.completed
    assert level.request_records is not None
    for session in range(3):  # every fixture conversation has 3 user turns: one conversation per session
        counts = [r.prompt_tokens for r in level.request_records.records if r.session == session]
        assert len(counts) == 3 and counts[0] < counts[1] < counts[2], counts

    _run(baseline_demo_server, tmp_path / "baseline.json", "baseline")

    base_level = load_result(tmp_path / "baseline.json").results[0]
    assert base_level.spec_per_request is None  # no speculation, no per-request block
    match = match_level(base_level, level)
    assert match is not None and match.compared == 9 and match.identical == 9, match
    report = run_compare(str(tmp_path / "baseline.json"), str(tmp_path / "dflash.json"))
    assert report.returncode == 0, report.stderr
    assert "all 9 served replies were identical" in report.stdout
