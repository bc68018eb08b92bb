"""The benchmark against the real vLLM CPU demo server (DFlash on), and against `vllm bench serve`.

Marked `server`: it uses the session-wide `demo_server` fixture (tests/conftest.py). About 1.5 minutes on
the quiet 2-core box (up to ~6 under heavy load from other work): three rounds of 32 x 128-token requests
per tool, plus importing vLLM once for `vllm bench serve`.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench_helpers import BENCH_SCRIPT, run_benchmark
from kimi_dflash.bench.result import load_result
from kimi_dflash.bench.settings import DEFAULT_INTERVAL_S
from kimi_dflash_lab import lab_environ

pytestmark = pytest.mark.server
PROGRESS = re.compile(r"\[8 sessions\] repeat 1/1: (\d+)/40 requests done")  # the default level's progress line


def test_multi_turn_run_reports_spec_decode(demo_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "demo.json"
    proc = run_benchmark(
        "--base-url", demo_server.base_url, "--model", demo_server.model, "--metrics-url", demo_server.metrics_url,
        "--sessions", "2", "--turns-per-session", "2", "--max-tokens", "32", "--warmup", "2", "--label", "demo-dflash",
        "--output", str(out), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = load_result(out)
    assert doc.server is not None and doc.server.version
    assert doc.server.models[0]["id"] == demo_server.model
    level = doc.results[0]
    assert level.completed == 4 and level.failed == 0
    assert level.tokens_counted_from_chunks == 0  # vLLM reports usage
    spec = level.spec_decode
    assert level.spec_decode_status == "ok" and spec is not None
    assert 0.0 < spec.acceptance_rate <= 1.0
    assert 1.0 < spec.acceptance_length <= 1.0 + len(spec.per_position)
    assert len(spec.per_position) == spec.num_speculative_tokens >= 1
    # several tokens per SSE chunk is what speculative decoding looks like from the client
    assert level.tokens_per_chunk is not None and level.tokens_per_chunk.mean > 1.0
    prompts = [row.prompt_tokens.mean for row in level.per_turn]
    assert prompts[1] > prompts[0]  # the second turn carries the first


def test_defaults_measure_the_demo_server(demo_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Nothing but the URL (the fixture's port; the default URL is where ./serve.sh listens, a unit test
    checks that): the model is discovered, the default workload (8 sessions x 5 turns x 512 tokens) runs, progress
    shows during the level, and Ctrl-C once the first turn is in writes what was measured with the defaults it ran.
    The whole default workload would take this CPU ~100 s; every other benchmark here runs to the end."""
    out = tmp_path / "defaults.json"
    command = [sys.executable, str(BENCH_SCRIPT), "--base-url", demo_server.base_url, "--output", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600  # progress prints every 10 s, so a stalled run still reaches this check
    try:
        seen = []
        for line in proc.stderr:  # type: ignore[union-attr]
            seen.append(line)
            done = PROGRESS.search(line)
            if (done and int(done.group(1)) >= 8) or time.monotonic() > deadline:  # every session's first turn
                break
        proc.send_signal(signal.SIGINT)
        stderr = "".join(seen) + proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    doc = load_result(out)
    assert doc.settings.model == demo_server.model and doc.run.status == "interrupted"
    level = doc.results[0]
    assert (level.sessions, level.turns_per_session, doc.settings.max_tokens) == (8, 5, 512)
    assert level.partial and level.completed >= 8 and level.output_tok_s and level.spec_decode is not None
    progress = PROGRESS.findall(stderr)
    assert len(progress) >= int(level.duration_s // DEFAULT_INTERVAL_S) - 1, stderr
    # 5 turns x 512 tokens outgrow a 2048-token context: announced up front, failures named
    context = next(entry.get("max_model_len") for entry in doc.server.models)  # type: ignore[union-attr]
    if context <= 5 * 512:
        assert "can outgrow the model's context" in stderr
        assert set(level.failures) <= {"http_400"}
    else:
        assert level.failed == 0


def test_aggregate_throughput_agrees_with_vllm_bench_serve(demo_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kimi_dflash.demo import demo_model_paths

    tokenizer = demo_model_paths().target_dir
    if not (tokenizer / "tokenizer.json").exists():
        pytest.skip(f"demo tokenizer not found under {tokenizer}")
    out = tmp_path / "crosscheck.json"
    # Both tools load the server at the same time, 4 sessions each, same prompts, one round after a discarded
    # priming run (one request per session of the pair: it meets their batch size once). Asserted: what does not
    # depend on the machine's load (the same requests completed, the same output tokens counted). The tok/s
    # difference is the instrument's printed figure, not an assertion: timing belongs in benchmarks
    # (docs/benchmark.md has measured figures and the command).
    proc = subprocess.run(
        [sys.executable, "-m", "kimi_dflash_lab.studies.crosscheck", "--base-url", demo_server.base_url,
         "--model", demo_server.model, "--tokenizer", str(tokenizer), "--concurrency", "4", "--requests", "32",
         "--max-tokens", "128", "--rounds", "1", "--mode", "concurrent", "--prime-requests", "8",
         "--output", str(out)],
        capture_output=True, text=True, timeout=1200, check=False, env=lab_environ(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    for run in report["rounds"]:
        assert run["ours"]["completed"] == run["vllm_bench_serve"]["completed"] == 32
        assert run["ours"]["output_tokens"] == run["vllm_bench_serve"]["total_output_tokens"] == 32 * 128
    assert len(report["rounds"]) == 1 and math.isfinite(report["output_tok_s_difference"])
    print(proc.stdout)  # the tok/s agreement, for the log (pytest -s shows it)
