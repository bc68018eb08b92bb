"""validate-fp8: the comparison, the capacity parser, the verdict, and the shipped prompt sets."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kimi_dflash.core.errors import UserError
from kimi_dflash.fp8.validate import Thresholds, kv_capacity_from_log, verdict_lines
from kimi_dflash.validate.engine import AgreementSummary, compare_tokens, summarize_agreement
from kimi_dflash.validate.prompts import (
    extract_answer,
    load_calibration_prompts,
    load_math_problems,
)
from repo_paths import REPO_ROOT


def test_compare_tokens() -> None:
    same = compare_tokens([1, 2, 3], [1, 2, 3])
    assert same.identical and same.first_divergence is None and same.prefix_agreement == 1.0
    split = compare_tokens([1, 2, 3, 4], [1, 2, 9, 4])
    assert not split.identical and split.first_divergence == 2 and split.prefix_agreement == 0.5
    shorter = compare_tokens([1, 2, 3], [1, 2])  # one stopped early: diverges where it ended
    assert shorter.first_divergence == 2 and shorter.common_prefix == 2
    assert compare_tokens([], []).identical


def test_summary() -> None:
    summary = summarize_agreement(
        [
            compare_tokens([1, 2], [1, 2]),
            compare_tokens([1, 2, 3, 4], [1, 5, 3, 4]),
            compare_tokens([7, 8, 9, 9], [7, 8, 9, 1]),
        ]
    )
    assert summary.identical == 1 and summary.earliest_divergence == 1 and summary.median_first_divergence == 2
    assert summary.mean_prefix_agreement == pytest.approx((1 + 0.25 + 0.75) / 3)


def test_kv_capacity_from_gpu_and_cpu_logs() -> None:
    gpu = "INFO [kv_cache_utils.py:1234] GPU KV cache size: 2,469,568 tokens\nMaximum concurrency ..."
    cpu = "(EngineCore pid=9) INFO [kv_cache_utils.py:2327] CPU KV cache size: 466,032 tokens, Maximum ..."
    assert kv_capacity_from_log(gpu) == 2469568 and kv_capacity_from_log(cpu) == 466032
    assert kv_capacity_from_log("nothing here") is None


def agreement(mean: float) -> AgreementSummary:
    return AgreementSummary(
        prompts=10, identical=5, mean_prefix_agreement=mean, median_first_divergence=40, earliest_divergence=3
    )


def test_verdicts() -> None:
    thresholds = Thresholds()
    status, reasons = verdict_lines(agreement(0.9), 0.90, 0.88, (1_230_368, 2_469_568), thresholds)
    assert status == "PASS" and reasons == []
    status, reasons = verdict_lines(agreement(0.9), 0.90, 0.70, (1_230_368, 2_469_568), thresholds)
    assert status == "FAIL" and "drops 20.0 points" in reasons[0]
    status, reasons = verdict_lines(agreement(0.2), 0.90, 0.90, (1_000, 1_050), thresholds)
    assert status == "WARN" and len(reasons) == 2 and "1.05x" in reasons[1]
    status, reasons = verdict_lines(agreement(0.9), 0.9, 0.9, (None, 5), thresholds)
    assert status == "WARN" and "capacity unknown" in reasons[0]


def test_extract_answer() -> None:
    assert extract_answer("First 3 bags... so 23 left.\nAnswer: 23") == 23
    assert extract_answer("answer = -2") == -2
    assert extract_answer("The total is 1,160 toys") == 1160
    assert extract_answer("no idea") is None


def test_shipped_prompt_sets() -> None:
    prompts = load_calibration_prompts()
    assert len(prompts) == 200 and len(set(prompts)) == 200
    problems = load_math_problems()
    assert len(problems) >= 30 and len({p.id for p in problems}) == len(problems)
    assert all(isinstance(p.answer, int) for p in problems)


def test_prompt_file_errors(tmp_path) -> None:
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "no prompt field"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"p.jsonl:2: .*non-empty \"prompt\""):
        load_calibration_prompts(bad)
    with pytest.raises(UserError, match="prompt file .*missing.jsonl: no such file"):
        load_calibration_prompts(tmp_path / "missing.jsonl")


def test_validate_script_reports_an_unreachable_server_without_a_traceback() -> None:
    result = subprocess.run(
        [
            str(REPO_ROOT / "benchmarks" / "validate-fp8.sh"),
            "--bf16-url",
            "http://127.0.0.1:9",
            "--fp8-url",
            "http://127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 3
    assert "cannot reach" in result.stderr and "Traceback" not in result.stderr


def test_calibrate_cli_errors_are_one_line() -> None:
    script = str(REPO_ROOT / "payload" / "calibrate_kv_scales.py")
    result = subprocess.run(
        [sys.executable, script, "--server", "http://127.0.0.1:9", "--out", "/tmp/x.json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2 and "--observe-dir" in result.stderr and "Traceback" not in result.stderr


def test_calibrate_refuses_a_bad_prompt_file_before_loading_a_model(tmp_path) -> None:
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "ok"}\n[1, 2]\n', encoding="utf-8")
    script = str(REPO_ROOT / "payload" / "calibrate_kv_scales.py")
    result = subprocess.run(
        [sys.executable, script, "--model", str(tmp_path / "no-model"), "--prompts", str(bad), "--out", "x.json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2 and "prompts.jsonl:2:" in result.stderr and "Traceback" not in result.stderr


def test_benchmark_failure_is_reported_not_raised(tmp_path) -> None:
    from kimi_dflash.fp8 import validate

    result = validate.run_benchmark("http://127.0.0.1:9", 4, "x", tmp_path / "b.json", [])
    assert result.status.startswith("exit ") and result.command[1:3] == ["-m", "kimi_dflash.bench"]
    assert result.detail and result.status in validate.benchmark_line("fp8", result)
    line = validate.benchmark_line(
        "bf16",
        validate.BenchSummary(
            status="ok", command=[], output="b.json", output_tok_s=900.94, sessions=64, completed=320, failed=0
        ),
    )
    assert "900.9 output tok/s at 64 sessions" in line
