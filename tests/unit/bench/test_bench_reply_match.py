"""Reply hashes: compare states whether two runs at temperature 0 served identical replies."""

from __future__ import annotations

import json
from pathlib import Path

from bench_helpers import bench_in_process, compare_in_process
from synthetic_server import running


def _run(url: str, out: Path, label: str, *extra: str) -> None:
    proc = bench_in_process(
        "--base-url",
        url,
        "--sessions",
        "2",
        "--turns-per-session",
        "3",
        "--max-tokens",
        "8",
        "--warmup",
        "0",
        "--label",
        label,
        "--output",
        str(out),
        "--progress-interval",
        "0",
        *extra,
    )
    assert proc.returncode == 0, proc.stderr


def test_compare_counts_identical_and_differing_replies(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    with running(["--ttft-ms", "5", "--chunk-interval-ms", "1"]) as url:  # deterministic replies
        _run(url, a, "base")
        _run(url, b, "cand")
    report = compare_in_process(str(a), str(b))
    assert report.returncode == 0, report.stderr
    assert "all 6 served replies were identical" in report.stdout

    document = json.loads(b.read_text())
    hashes = document["results"][0]["reply_hashes"]
    assert sorted(hashes) == [f"0/{s}/{k}" for s in range(2) for k in range(3)]
    hashes["0/1/2"] = "0" * 64
    c.write_text(json.dumps(document))
    report = compare_in_process(str(a), str(c))
    assert "**1 of 6 replies differed**" in report.stdout and "| 2 | 6 | 5 (83.3 %) | 0/1/2 |" in report.stdout


def test_sampled_runs_are_not_compared(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    with running(["--ttft-ms", "5", "--chunk-interval-ms", "1"]) as url:
        _run(url, a, "base", "--temperature", "0.7")
        _run(url, b, "cand", "--temperature", "0.7")
    report = compare_in_process(str(a), str(b))
    assert report.returncode == 0 and "only under greedy decoding" in report.stdout


def test_open_loop_runs_are_matched_by_rate(tmp_path: Path) -> None:
    """An open loop's levels are its rates: the reply comparison pairs them like the speedup table does (it used
    to look them up by session count and crash)."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    with running(["--ttft-ms", "5", "--chunk-interval-ms", "1"]) as url:
        for out, label in ((a, "base"), (b, "cand")):
            proc = bench_in_process(
                "--base-url",
                url,
                "--request-rate",
                "inf,50",
                "--num-sessions",
                "2",
                "--turns-per-session",
                "2",
                "--max-tokens",
                "8",
                "--warmup",
                "0",
                "--label",
                label,
                "--output",
                str(out),
            )
            assert proc.returncode == 0, proc.stderr
    report = compare_in_process(str(a), str(b))
    assert report.returncode == 0, report.stderr
    assert "all 8 served replies were identical" in report.stdout
