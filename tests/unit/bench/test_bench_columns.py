"""A column is declared once (bench/columns.py) and every table that selects it shows it: the stdout table, the levels
CSV and the sweep's table (README's Results, qualify's report). The CSV keeps the documented columns."""

from __future__ import annotations

import csv
import io
from dataclasses import replace
from pathlib import Path

import pytest

from bench_helpers import EXAMPLE_RESULT
from kimi_dflash.bench import columns, export_csv, report
from kimi_dflash.bench.result import BenchmarkResult, ServerConfig, load_result
from kimi_dflash.core.formatting import Fmt
from kimi_dflash.sweep import aggregate

# A figure no table shows today: the prompt tokens a level sent, in thousands.
PROMPT_KTOK = columns.Column("input_ktok", "input ktok", lambda level: level.input_tokens / 1000, Fmt(2))

DOCUMENTED_LEVEL_CSV = [  # docs/benchmark.md, "Percentiles and CSV"
    "level", "sessions", "request_rate", "repeats", "requests", "completed", "failed",
    "output_tokens", "duration_s", "output_tok_s", "request_throughput", "ttft_ms_mean", "ttft_ms_p50",
    "ttft_ms_p90", "ttft_ms_p95", "ttft_ms_p99", "ttft_ms_p99.9", "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p90",
    "tpot_ms_p95", "tpot_ms_p99", "tpot_ms_p99.9", "e2el_s_mean", "e2el_s_p50", "e2el_s_p90", "e2el_s_p95",
    "e2el_s_p99", "e2el_s_p99.9", "per_user_tok_s_mean", "per_user_tok_s_p50", "per_user_tok_s_p90",
    "per_user_tok_s_p95", "per_user_tok_s_p99", "per_user_tok_s_p99.9", "output_tok_s_ci_low",
    "output_tok_s_ci_high", "per_user_tok_s_ci_low", "per_user_tok_s_ci_high", "slo_attainment", "request_goodput",
    "output_goodput", "achieved_rate", "max_in_flight", "queue_delay_ms_p50", "queue_delay_ms_p99",
    "acceptance_rate", "acceptance_length",
]  # fmt: skip


@pytest.fixture
def example() -> BenchmarkResult:
    result = load_result(EXAMPLE_RESULT)
    assert all(level.input_tokens for level in result.results)
    return result


def test_a_declared_column_reaches_stdout_the_csv_and_the_sweep_table(
    example: BenchmarkResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for table in ("STDOUT", "CSV", "SWEEP"):
        monkeypatch.setattr(columns, table, (*getattr(columns, table), PROMPT_KTOK))
    shown = [f"{level.input_tokens / 1000:.2f}" for level in example.results]

    out = io.StringIO()
    report.print_summary(example, out)
    header, *rows = out.getvalue().splitlines()[1 : 2 + len(example.results)]
    assert header.endswith("  input ktok")
    assert [row.split()[-1] for row in rows] == shown

    _, levels_csv = export_csv.write_csv(tmp_path / "run.json", example.results, [[] for _ in example.results], 0.0)
    written = list(csv.DictReader(levels_csv.open(encoding="utf-8")))
    assert [float(row["input_ktok"]) for row in written] == [level.input_tokens / 1000 for level in example.results]

    point = ServerConfig(config="demo-cpu.env", overrides={"NUM_SPECULATIVE_TOKENS": "2"})
    table = aggregate.render_table(aggregate.cells([("k2", replace(example, server_config=point))]))
    head, _, *lines = table.splitlines()
    assert head.endswith("| input ktok | Pareto |")
    assert [line.split(" | ")[-2] for line in lines] == shown


def test_the_levels_csv_keeps_its_documented_columns(example: BenchmarkResult, tmp_path: Path) -> None:
    no_records = [[] for _ in example.results]
    _, levels_csv = export_csv.write_csv(tmp_path / "run.json", example.results, no_records, 0.0, ["p99.9"])
    header, *rows = csv.reader(levels_csv.open(encoding="utf-8"))
    assert header == DOCUMENTED_LEVEL_CSV
    assert len(rows) == len(example.results) and all(len(row) == len(header) for row in rows)
    first = dict(zip(header, rows[0]))
    level = example.results[0]
    assert first["level"] == str(level.sessions) and float(first["ttft_ms_p95"]) == pytest.approx(level.ttft_ms.p95)
    assert float(first["acceptance_rate"]) == pytest.approx(level.spec_decode.acceptance_rate)  # type: ignore[union-attr]


def test_one_figure_reads_the_same_in_every_table(example: BenchmarkResult) -> None:
    """The sweep and the comparison show a column through its one declaration: same heading, same precision."""
    from kimi_dflash.bench.compare import Run, render_markdown

    level = example.results[0]
    acceptance = columns.ACCEPTANCE_RATE.cell(level)
    assert acceptance.endswith(" %")
    out = io.StringIO()
    report.print_level(level, out)
    assert acceptance in out.getvalue().splitlines()[1]
    compared = render_markdown([Run(Path("a.json"), "a", example), Run(Path("b.json"), "b", example)])
    assert f"| a | {level.sessions} | {acceptance} | {columns.ACCEPTANCE_LENGTH.cell(level)} |" in compared
    swept = aggregate.render_table(aggregate.cells([("a", example)]))
    assert f"| {acceptance} |" in swept and f"| {columns.TTFT['p95'].header} |" in swept
