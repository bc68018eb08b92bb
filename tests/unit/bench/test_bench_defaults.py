"""Defaults that meet the server ./serve.sh starts, model discovery, and progress during a long level."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench_helpers import bench_in_process, run_benchmark
from kimi_dflash.bench import cli as bench_cli
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.report import progress_line
from kimi_dflash.bench.result import load_result
from kimi_dflash.bench.server_info import choose_model
from kimi_dflash.bench.settings import DEFAULT_BASE_URL
from kimi_dflash.config.schema import KEYS
from kimi_dflash.core import options
from kimi_dflash.core.errors import UserError
from synthetic_server import running

PROGRESS = re.compile(
    r"\[(\d+) sessions\] repeat 1/1: (\d+)/(\d+) requests done, ([\d.]+) tok/s so far, [\d.]+ s elapsed"
)


def test_default_base_url_is_where_serve_sh_listens() -> None:
    defaults = {key.name: key.default for key in KEYS}
    assert f"http://{defaults['HOST']}:{defaults['PORT']}" == DEFAULT_BASE_URL
    args = options.build_parser(bench_cli).parse_args([])
    assert args.base_url == DEFAULT_BASE_URL and args.model is None


def test_model_discovery() -> None:
    url = "http://h/v1/models"
    assert choose_model(None, ["only"], url) == "only"
    assert choose_model("b", ["a", "b"], url) == "b"
    with pytest.raises(UserError, match=r"serves 2 models \(a, b\); choose one with --model"):
        choose_model(None, ["a", "b"], url)
    with pytest.raises(UserError, match="lists no models; pass --model"):
        choose_model(None, [], url)
    with pytest.raises(UserError, match="'c' is not served here; the server has: a, b"):
        choose_model("c", ["a", "b"], url)


def test_progress_line_counts_finished_requests_and_their_tokens() -> None:
    records = [RequestRecord(sessions=2, repeat=0, session=s, turn=1) for s in range(4)]
    records[0].done_time, records[0].output_tokens = 1.0, 30
    records[1].done_time, records[1].output_tokens = 2.0, 10
    records[2].done_time, records[2].error = 2.5, "http_500"
    line = progress_line("[2 sessions] repeat 1/1", records, total=8, elapsed_s=4.0)
    assert line == (
        "[2 sessions] repeat 1/1: 3/8 requests done (1 failed), 10.0 tok/s so far, 4.0 s elapsed, about 6.7 s left"
    )


def test_progress_and_discovered_model_on_a_real_run(tmp_path: Path) -> None:
    out = tmp_path / "progress.json"
    # 2 sessions x 4 turns of 20 chunks every 20 ms: the level lasts ~2 s; progress every 0.3 s
    with running(["--ttft-ms", "20", "--chunk-interval-ms", "20", "--model", "only-model"]) as url:
        proc = bench_in_process(
            "--base-url",
            url,
            "--sessions",
            "2",
            "--turns-per-session",
            "4",
            "--max-tokens",
            "20",
            "--warmup",
            "0",
            "--progress-interval",
            "0.3",
            "--output",
            str(out),
        )
    assert proc.returncode == 0, proc.stderr
    doc = load_result(out)
    assert doc.settings.model == "only-model" and doc.results[0].completed == 8
    lines = [PROGRESS.search(line) for line in proc.stderr.splitlines()]
    progress = [m for m in lines if m]
    assert len(progress) >= 2, proc.stderr
    done = [int(m.group(2)) for m in progress]
    assert done == sorted(done) and all(int(m.group(3)) == 8 for m in progress)
    assert "requests done" not in proc.stdout  # stdout keeps only the tables


def test_a_conversation_longer_than_the_context_is_announced(tmp_path: Path) -> None:
    out = tmp_path / "context.json"
    with running(["--ttft-ms", "5", "--chunk-interval-ms", "1", "--max-model-len", "64"]) as url:
        proc = bench_in_process(
            "--base-url",
            url,
            "--sessions",
            "1",
            "--turns-per-session",
            "4",
            "--max-tokens",
            "16",
            "--warmup",
            "0",
            "--output",
            str(out),
        )
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: the conversation can outgrow the model's context: 4 turns x 16 reply tokens = 64" in proc.stderr
    server = load_result(out).server
    assert server is not None and server.notes and "max_model_len is 64" in server.notes[0]


def test_the_command_line_is_parsed_and_refused_without_the_run_loaded() -> None:
    # --help and a bad argument answer without importing aiohttp and pydantic (bench/run.py): 0.2 s, not 0.6 s.
    import subprocess
    import sys

    loaded = "sorted({'aiohttp', 'pydantic', 'kimi_dflash.bench.run'} & {*sys.modules})"
    code = f"import sys, kimi_dflash.bench.cli; print({loaded})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]"
    refused = run_benchmark("--sessions", "0", timeout=60)
    assert refused.returncode == 2 and "positive integers" in refused.stderr
