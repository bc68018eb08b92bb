"""Sweep grid/state/aggregate, the advisor's model and validate's verdict: pure parts, no server."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_dflash.advisor.model import Measured, acceptance_per_position, predict, recommend, tau
from kimi_dflash.bench.result import ServerConfig, parse_result
from kimi_dflash.core.atomic_write import write_json_atomic
from kimi_dflash.core.errors import UserError
from kimi_dflash.sweep import aggregate, state
from kimi_dflash.sweep.grid import Point, parse_axis, points
from kimi_dflash.validate.cli import verdict
from kimi_dflash.validate.engine import MathRow, MathScore, compare_tokens, summarize_agreement
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
EXAMPLE = json.loads((ROOT / "docs" / "benchmark-result.example.json").read_text(encoding="utf-8"))


# -- sweep grid ------------------------------------------------------------------------------------------------
def test_grid_is_the_product_in_the_given_order() -> None:
    grid = points([parse_axis("NUM_SPECULATIVE_TOKENS=0,2"), parse_axis("MAX_NUM_SEQS=8,16")])
    assert [p.label for p in grid] == [
        "NUM_SPECULATIVE_TOKENS=0 MAX_NUM_SEQS=8",
        "NUM_SPECULATIVE_TOKENS=0 MAX_NUM_SEQS=16",
        "NUM_SPECULATIVE_TOKENS=2 MAX_NUM_SEQS=8",
        "NUM_SPECULATIVE_TOKENS=2 MAX_NUM_SEQS=16",
    ]
    assert grid[1].name == "NUM_SPECULATIVE_TOKENS-0__MAX_NUM_SEQS-16"


def test_zero_speculative_tokens_is_the_autoregressive_baseline() -> None:
    assert Point((("NUM_SPECULATIVE_TOKENS", "0"),)).server_env() == {"SPECULATIVE_METHOD": "none"}
    assert Point((("NUM_SPECULATIVE_TOKENS", "3"),)).server_env() == {
        "NUM_SPECULATIVE_TOKENS": "3",
        "SPECULATIVE_METHOD": "dflash",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("NOPE=1", "not a config key"),
        ("PORT=1,2", "picks ports"),
        ("MAX_NUM_SEQS", "KEY=v1,v2"),
        ("NUM_SPECULATIVE_TOKENS=two", "count >= 0"),
        ("MAX_NUM_SEQS=", "no values"),
    ],
)
def test_bad_grid_options_name_the_fix(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_axis(text)


# -- sweep state and aggregate --------------------------------------------------------------------------------
def _result(k: int, sessions: int, tok_s: float, per_user: float, status: str = "complete") -> dict:
    doc = copy.deepcopy(EXAMPLE)
    doc["run"]["status"] = status
    level = doc["results"][0]
    level.update(sessions=sessions, output_tok_s=tok_s)
    level["per_user_tok_s"]["mean"] = per_user
    doc["results"] = [level]
    result = parse_result(doc)
    config = ServerConfig(config="demo-cpu.env", overrides={"NUM_SPECULATIVE_TOKENS": str(k)})
    return dataclasses.replace(result, server_config=config).to_json()


def test_a_point_is_finished_only_when_its_result_is_complete(tmp_path: Path) -> None:
    point = Point((("NUM_SPECULATIVE_TOKENS", "2"),))
    assert state.finished_result(tmp_path, point) is None
    write_json_atomic(state.result_path(tmp_path, point), _result(2, 2, 100.0, 50.0, status="interrupted"))
    assert state.finished_result(tmp_path, point) is None
    state.result_path(tmp_path, point).write_text('{"schema": "kimi-dflash/benchmark-result", "sche', "utf-8")
    assert state.finished_result(tmp_path, point) is None  # a torn file is redone, not trusted
    write_json_atomic(state.result_path(tmp_path, point), _result(2, 2, 100.0, 50.0))
    assert state.finished_result(tmp_path, point) is not None
    assert state.finished_result(tmp_path, Point((("NUM_SPECULATIVE_TOKENS", "4"),))) is None


def _sweep_state(out: Path, sessions: list[int]) -> state.SweepState:
    signature = state.SweepSignature(config="demo-cpu.env", grid=[], sessions=sessions, benchmark_options=[])
    return state.SweepState(signature=signature).at(out)


def test_a_rerun_with_other_settings_is_refused(tmp_path: Path) -> None:
    _sweep_state(tmp_path, [2, 4]).open()
    assert [r.resumed for r in _sweep_state(tmp_path, [2, 4]).open().runs] == ["false", "true"]
    with pytest.raises(UserError, match="different sessions"):
        _sweep_state(tmp_path, [8]).open()


def test_a_sweep_json_of_an_older_sweep_resumes(tmp_path: Path) -> None:
    """Before the sweep's state was a runs.state document, sweep.json held the signature alone."""
    legacy = {"config": "demo-cpu.env", "grid": [], "sessions": [2, 4], "benchmark_options": []}
    (tmp_path / "sweep.json").write_text(json.dumps(legacy), encoding="utf-8")
    resumed = _sweep_state(tmp_path, [2, 4]).open()
    assert [r.resumed for r in resumed.runs] == ["true"]
    assert json.loads((tmp_path / "sweep.json").read_text())["signature"] == legacy
    with pytest.raises(UserError, match="different sessions"):
        _sweep_state(tmp_path, [8]).open()


def test_a_damaged_sweep_json_is_refused_with_a_message(tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text('{"config": 3}', encoding="utf-8")
    with pytest.raises(UserError, match=r"sweep state file .*sweep.json: not a sweep state file .*signature.config"):
        _sweep_state(tmp_path, [2]).open()


def test_table_compares_at_matched_concurrency_and_marks_the_pareto_front() -> None:
    runs = [
        ("k0", parse_result(_result(0, 2, 100.0, 60.0))),
        ("k2", parse_result(_result(2, 2, 150.0, 80.0))),
        ("k4", parse_result(_result(4, 2, 120.0, 90.0))),
        ("k4b", parse_result(_result(4, 4, 110.0, 40.0))),
    ]
    found = aggregate.cells(runs)
    assert {(c.point, c.sessions) for c in aggregate.pareto_front(found)} == {("k2", 2), ("k4", 2)}
    table = aggregate.render_table(
        found, [state.Failure(point="k8", stage="server", detail="did not start", log_tail=[])]
    )
    row = next(line for line in table.splitlines() if "NUM_SPECULATIVE_TOKENS=2 " in line)
    assert "| 1.50x |" in row and "★" in row
    row4 = next(line for line in table.splitlines() if line.startswith("| 4 |"))
    assert "| — |" in row4  # no baseline measured at 4 sessions: no ratio across concurrencies
    assert "FAILED k8 (server): did not start" in table


# -- advisor --------------------------------------------------------------------------------------------------
def _measured(k: int, sessions: int, p: tuple[float, ...], a: float, b: float) -> Measured:
    t = tau(p, k)
    tpot = (a + b * k) / t
    tokens, ttft = 100.0, 0.05
    return Measured(
        source="x",
        k=k,
        sessions=sessions,
        output_tok_s=sessions * tokens / (ttft + 99 * tpot),
        tpot_s=tpot,
        per_user_tok_s=1 / tpot,
        ttft_s=ttft,
        tokens_per_request=tokens,
        tau=t,
        per_position=p[:k],
        drafts=1000,
    )


def test_advisor_recovers_a_held_out_k_when_the_model_holds() -> None:
    p = (0.8, 0.6, 0.45, 0.3)
    runs = [_measured(k, c, p, a=0.02 * c, b=0.004 * c) for k in (1, 2, 4) for c in (2, 4)]
    assert acceptance_per_position(runs) == pytest.approx(p)
    _, predictions = predict(runs, fit_k={1, 4})
    held = [pr for pr in predictions if pr.k == 2]
    assert len(held) == 2 and all(not pr.fitted for pr in held)
    for pr in held:
        assert pr.error == pytest.approx(0.0, abs=1e-9)
        assert pr.per_user_tok_s == pytest.approx(pr.measured.per_user_tok_s)  # type: ignore[union-attr]


def test_advisor_recommends_the_fastest_k_per_concurrency() -> None:
    p = (0.9, 0.2, 0.1, 0.05)  # acceptance falls off a cliff after the first position
    runs = [_measured(k, 8, p, a=0.03, b=0.01) for k in (1, 4)]
    best = recommend(predict(runs)[1])
    assert best[8].k == 1


def test_advisor_needs_a_speculative_run() -> None:
    with pytest.raises(UserError, match="at least one run at k >= 1"):
        acceptance_per_position([_measured(0, 2, (), a=0.02, b=0.0)])


# -- validate -------------------------------------------------------------------------------------------------
def _math(ref: list[int | None], cand: list[int | None]) -> MathScore:
    return MathScore([MathRow(str(i), 1, r, c) for i, (r, c) in enumerate(zip(ref, cand))])


def test_any_divergence_fails_a_lossless_candidate() -> None:
    same = summarize_agreement([compare_tokens([1, 2, 3], [1, 2, 3])] * 3)
    differs = summarize_agreement([compare_tokens([1, 2, 3], [1, 2, 3]), compare_tokens([1, 2, 3], [1, 9, 3])])
    assert verdict(same, _math([1], [1]), allow_divergence=False, max_math_drop=0, same_server=False)[0] == "PASS"
    status, reasons = verdict(differs, None, allow_divergence=False, max_math_drop=0, same_server=False)
    assert status == "FAIL" and "1/2 outputs differ" in reasons[0]
    assert verdict(differs, None, allow_divergence=True, max_math_drop=0, same_server=False)[0] == "WARN"
    assert (
        verdict(differs, _math([1, 1], [1, 2]), allow_divergence=True, max_math_drop=10, same_server=False)[0] == "FAIL"
    )
    assert verdict(same, None, allow_divergence=False, max_math_drop=0, same_server=True)[0] == "WARN"


def test_validate_reports_an_unreachable_server_as_exit_3() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "payload" / "validate.py"),
            "--reference",
            "http://127.0.0.1:9",
            "--candidate",
            "http://127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3 and "cannot reach" in result.stderr and "Traceback" not in result.stderr


# -- sweep command line (no server) ---------------------------------------------------------------------------
def _launcher(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "launchers" / "kimi26-vllm-dflash-sweep.sh"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "KIMI_PYTHON": sys.executable},
    )


def test_dry_run_prints_the_points_and_starts_nothing(tmp_path: Path) -> None:
    result = _launcher(
        str(ROOT / "configs" / "demo-cpu.env"),
        "--grid",
        "NUM_SPECULATIVE_TOKENS=0,2,4",
        "--sessions",
        "2,4",
        "--out",
        str(tmp_path / "out"),
        "--dry-run",
        "--max-tokens",
        "32",
    )
    assert result.returncode == 0, result.stderr
    assert "3 server points x sessions 2,4" in result.stdout
    assert "SPECULATIVE_METHOD=none" in result.stdout and result.stdout.count("to run") == 3
    assert "--max-tokens 32" in result.stdout and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--grid", "NUM_SPECULATIVE_TOKENS=1", "--base-url", "http://x"], "set by the sweep"),
        (["--grid", "NUM_SPECULATIVE_TOKENS=1", "--max-tokens", "zero"], "benchmark options"),
        (["--grid", "NUM_SPECULATIVE_TOKENS=1", "--grid", "NUM_SPECULATIVE_TOKENS=2"], "given twice"),
    ],
)
def test_bad_sweep_arguments_exit_2_with_the_reason(tmp_path: Path, args: list[str], message: str) -> None:
    result = _launcher(str(ROOT / "configs" / "demo-cpu.env"), "--sessions", "2", "--out", str(tmp_path), *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_a_point_whose_server_fails_is_recorded_with_its_log_tail_and_the_sweep_goes_on(tmp_path: Path) -> None:
    fake = tmp_path / "serve.sh"  # stands in for serve.sh: --wait fails after writing a log, --stop succeeds
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [[ " $* " == *" --wait "* ]]; then\n'
        '  args=("$@"); log="${args[-1]}"; echo "fatal: out of memory (port $PORT)" > "$log"\n'
        '  echo "serve: vLLM exited with status 1" >&2; exit 1\nfi\nexit 0\n'
    )
    fake.chmod(0o755)
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kimi_dflash.sweep",
            "--serve-sh",
            str(fake),
            str(ROOT / "configs" / "demo-cpu.env"),
            "--grid",
            "NUM_SPECULATIVE_TOKENS=1,2",
            "--sessions",
            "2",
            "--out",
            str(out),
            "--no-plots",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    failures = state.read_failures(out)
    assert [f.point for f in failures] == ["NUM_SPECULATIVE_TOKENS-1", "NUM_SPECULATIVE_TOKENS-2"]  # both tried
    assert all(f.stage == "server" and "vLLM exited with status 1" in f.detail for f in failures)
    assert any("fatal: out of memory" in line for line in failures[0].log_tail)
    assert "FAILED NUM_SPECULATIVE_TOKENS-1 (server)" in (out / "summary.md").read_text(encoding="utf-8")
    assert not (out / "running.json").exists()


def test_advisor_refuses_to_recommend_from_a_single_k() -> None:
    p = (0.8, 0.6)
    runs = [_measured(k, 4, p, a=0.02, b=0.004) for k in (0, 2)]  # a baseline and one speculative k
    with pytest.raises(UserError, match="only k=2"):
        predict(runs)


def test_sweep_rows_and_plot_legends_name_what_each_point_set() -> None:
    from kimi_dflash.sweep.aggregate import Cell, render_table

    level = parse_result(_result(2, 4, 100.0, 30.0)).results[0]
    cell = Cell("NUM_SPECULATIVE_TOKENS-2", {"NUM_SPECULATIVE_TOKENS": "2"}, level)
    assert cell.label == "NUM_SPECULATIVE_TOKENS=2"
    assert "| 4 | NUM_SPECULATIVE_TOKENS=2 | 100.0 |" in render_table([cell])
    assert Cell("plain", {}, level).label == "plain"
