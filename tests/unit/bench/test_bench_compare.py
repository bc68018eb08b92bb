"""Head-to-head comparison at matched concurrency, refusal of mismatched runs, plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_helpers import bench_in_process, compare_in_process, run_compare
from kimi_dflash.bench import compare
from kimi_dflash.bench.report import redact_argv
from kimi_dflash.bench.result import load_result
from kimi_dflash.core.atomic_write import write_json_atomic
from kimi_dflash.core.errors import UserError
from synthetic_server import running


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real runs against two synthetic servers: a 'baseline' (1 token per chunk) and a 'spec' one that
    streams 3 tokens per verify step at the same chunk cadence (so ~3x the tokens per second)."""
    out = tmp_path_factory.mktemp("compare")
    paths = {}
    common = ["--turns-per-session", "2", "--max-tokens", "12", "--warmup", "1"]
    servers = {
        "baseline": ["--ttft-ms", "30", "--chunk-interval-ms", "10"],
        "spec": ["--ttft-ms", "30", "--chunk-interval-ms", "10", "--chunk-tokens", "3", "--spec-tokens", "2"],
    }
    for name, server_args in servers.items():
        with running(server_args) as url:
            for suffix, sessions in (("", "2,4"), ("-other-levels", "8")):
                paths[name + suffix] = out / f"{name}{suffix}.json"
                output = str(paths[name + suffix])
                proc = bench_in_process(
                    "--base-url", url, "--sessions", sessions, "--label", name, "--output", output, *common
                )
                assert proc.returncode == 0, proc.stderr
            if name == "baseline":  # the same server, another workload
                paths["longer"] = out / "longer.json"
                longer = ("--turns-per-session", "2", "--max-tokens", "24", "--warmup", "0")
                proc = bench_in_process(
                    "--base-url", url, "--sessions", "2", "--label", "longer", "--output", str(paths["longer"]), *longer
                )
                assert proc.returncode == 0, proc.stderr
    return paths


def test_matched_concurrency_table_shows_the_speedup(results: dict[str, Path]) -> None:
    runs = compare.load_runs([results["baseline"], results["spec"]])
    md = compare.render_markdown(runs)
    base, spec = (r.levels for r in runs)
    for sessions in (2, 4):
        speedup = spec[sessions].output_tok_s / base[sessions].output_tok_s
        assert speedup > 1.5  # 3 tokens per chunk (about 2.3x after the shared TTFT; timing on a busy box varies)
        assert f"| {sessions} |" in md and f"**{speedup:.2f}x**" in md
    assert "| spec | 2 | 100.0 % | 3.00 | 100.0 %, 100.0 % |" in md  # every draft accepted
    assert "no speculation (absent)" in md
    assert "Read before quoting" not in md  # nothing to warn about


def test_different_concurrencies_are_refused(results: dict[str, Path]) -> None:
    runs = compare.load_runs([results["baseline"], results["spec-other-levels"]])
    with pytest.raises(UserError, match="no concurrency level in common"):
        compare.render_markdown(runs)
    proc = run_compare(str(results["baseline"]), str(results["spec-other-levels"]), timeout=60)
    assert proc.returncode == 2 and "matched concurrency" in proc.stderr and "Traceback" not in proc.stderr


def test_partially_matching_levels_are_flagged(results: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(results["spec"].read_text())
    doc["results"] += json.loads(results["spec-other-levels"].read_text())["results"]
    merged = tmp_path / "spec-2-4-8.json"
    write_json_atomic(merged, doc)
    md = compare.render_markdown(compare.load_runs([results["baseline"], merged]))
    assert "Not compared (no matching concurrency)" in md and "[8]" in md


def test_different_workloads_need_allow_mismatch(results: dict[str, Path]) -> None:
    runs = compare.load_runs([results["baseline"], results["longer"]])
    with pytest.raises(UserError, match="max_tokens: 12 vs 24"):
        compare.render_markdown(runs)
    md = compare.render_markdown(runs, allow_mismatch=True)
    assert "different workloads" in md and "max_tokens: 12 vs 24" in md


def test_cli_writes_markdown_and_plots(results: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    report, plots = tmp_path / "report.md", tmp_path / "plots"
    proc = compare_in_process(
        str(results["baseline"]), str(results["spec"]), "--markdown", str(report), "--plots", str(plots)
    )
    assert proc.returncode == 0, proc.stderr
    assert "speedup" in report.read_text()
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["acceptance.png", "latency_p95.png", "per_user.png", "throughput.png"]
    for png in plots.iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_files_written_by_the_benchmark_load_through_the_model(results: dict[str, Path]) -> None:
    doc = load_result(results["spec"])
    assert doc.schema == "kimi-dflash/benchmark-result" and doc.schema_version == 1
    assert doc.run.label == "spec" and doc.tool.version and doc.run.status == "complete"
    # the model covers every field the benchmark writes: loading and writing back changes nothing
    assert doc.to_json() == json.loads(results["spec"].read_text())


def test_a_result_is_saved_atomically_and_nan_is_refused(results: dict[str, Path], tmp_path: Path) -> None:
    result, target = load_result(results["spec"]), tmp_path / "a.json"
    result.save(target)
    result.save(target)
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"] and load_result(target) == result
    result.results[0].output_tok_s = float("nan")
    with pytest.raises(ValueError):
        result.save(target)  # NaN is not JSON: refused, file untouched
    assert load_result(target).results[0].output_tok_s == load_result(results["spec"]).results[0].output_tok_s
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_redact_argv() -> None:
    assert redact_argv(["b.py", "--api-key", "s3cret", "--api-key=s3cret", "--label", "x"]) == [
        "b.py", "--api-key", "***", "--api-key=***", "--label", "x",
    ]  # fmt: skip
