"""SLOs: parsing, attainment and goodput, recounted from the per-request records and the CSV export."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from bench_helpers import REPO, bench_in_process
from kimi_dflash.bench import goodput
from kimi_dflash.bench.export_csv import paths_for
from kimi_dflash.bench.records import CANCELLED, RequestRecord
from kimi_dflash.bench.result import load_result
from synthetic_server import running


def test_parse_slo_units() -> None:
    assert goodput.parse_slo("ttft:0.5s,tpot:50ms,e2el:2500ms,user_tps:20") == {
        "ttft_ms": 500.0,
        "tpot_ms": 50.0,
        "e2el_s": 2.5,
        "user_tok_s": 20.0,
    }
    assert goodput.parse_slo("e2el:10s") == {"e2el_s": 10.0}


@pytest.mark.parametrize("text", ["", "ttft", "speed:3", "ttft:fast", "ttft:-1ms", "user_tps:20ms"])
def test_bad_slo_is_refused_with_the_form(text: str) -> None:
    with pytest.raises(ValueError, match="slo"):
        goodput.parse_slo(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft:1e400ms", "ttft '1e400ms' is not a finite number"),
        ("e2el:1e306s", "e2el '1e306s' is not a finite number"),  # finite as given, infinite in ms
        ("user_tps:1e999", "user_tps '1e999' is not a finite number"),
        ("ttft:1s,tpot:50ms,ttft:2s", "ttft is given twice"),
        ("tpot:50", "tpot needs a unit, ms or s"),  # 50 ms or 50 s? never guessed
        ("e2el:10", "e2el needs a unit, ms or s"),
    ],
)
def test_infinite_repeated_or_unitless_objectives_are_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        goodput.parse_slo(text)


@pytest.mark.parametrize(("slo", "message"), [("tpot:50", "tpot needs a unit"), ("e2el:1s,e2el:2s", "e2el is given")])
def test_the_benchmark_refuses_such_an_slo_with_exit_2(slo: str, message: str) -> None:
    proc = bench_in_process("--slo", slo, "--base-url", "http://127.0.0.1:9")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_qualify_refuses_an_infinite_slo_in_its_dry_run() -> None:
    """qualify parses --slo with the benchmark's parser: the infinite SLO is refused before any plan is shown."""
    proc = subprocess.run(
        [sys.executable, "-m", "kimi_dflash.cli", "qualify", str(REPO / "configs/demo-cpu.env"), "--dry-run",
         "--slo", "ttft:1e400ms"],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # qualify's exit for bad arguments
    assert "not a finite number" in proc.stderr and "Traceback" not in proc.stderr
    assert "estimated" not in proc.stdout  # no plan shown


def _record(ttft_s: float, e2el_s: float, n: int, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        sessions=1, repeat=0, session=0, turn=1, send_time=10.0, first_token_time=10.0 + ttft_s,
        last_token_time=10.0 + e2el_s, done_time=10.0 + e2el_s, output_tokens=n, error=error,
    )  # fmt: skip


def test_goodput_by_hand() -> None:
    slo = {"ttft_ms": 100.0, "tpot_ms": 20.0}
    records = [
        _record(0.05, 0.05 + 0.01 * 9, 10),  # TTFT 50 ms, TPOT 10 ms: meets
        _record(0.15, 0.15 + 0.01 * 9, 10),  # TTFT too slow
        _record(0.05, 0.05 + 0.03 * 9, 10),  # TPOT too slow
        _record(0.05, 0.05, 1),  # one token: no TPOT, meets
        _record(0.05, 0.06, 2, error="http_500"),  # failed: judged, never meets
        _record(0.05, 0.06, 2, error=CANCELLED),  # cancelled: not judged
    ]
    result = goodput.goodput(records, duration_s=2.0, slo=slo)
    assert (result.requests, result.met) == (5, 2)
    assert result.attainment == pytest.approx(0.4)
    assert result.request_goodput == pytest.approx(1.0)
    assert result.output_goodput == pytest.approx((10 + 1) / 2.0)
    assert result.violations == {"ttft_ms": 1, "tpot_ms": 1}


def test_goodput_equals_a_recount_from_the_records_and_the_csv(tmp_path: Path) -> None:
    out = tmp_path / "slo.json"
    slo_ttft_ms, slo_tpot_ms = 60.0, 10.3
    # every 4th request fails (HTTP 500); TPOT sits at 10 ms +- the box's jitter, so the tpot limit splits the rest
    with running(["--ttft-ms", "50", "--chunk-interval-ms", "10", "--faults", "ok,ok,ok,http_500"]) as url:
        proc = bench_in_process(
            "--base-url",
            url,
            "--sessions",
            "3,6",
            "--turns-per-session",
            "3",
            "--max-tokens",
            "8",
            "--warmup",
            "0",
            "--slo",
            f"ttft:{slo_ttft_ms}ms,tpot:{slo_tpot_ms}ms",
            "--record-requests",
            "--csv",
            "--output",
            str(out),
            "--percentiles",
            "50,99.9",
        )
        assert proc.returncode == 0, proc.stderr
    doc = load_result(out)
    requests_csv, levels_csv = paths_for(out)
    csv_rows = list(csv.DictReader(requests_csv.open()))
    level_rows = {row["level"]: row for row in csv.DictReader(levels_csv.open())}
    for level in doc.results:
        assert level.goodput is not None and level.request_records is not None
        met = tokens = judged = 0
        for r in level.request_records.records:  # an independent recount, from the raw timestamps
            if r.error == CANCELLED:
                continue
            judged += 1
            if r.error is not None:
                continue
            ttft_ms = (r.first_token_time - r.send_time) * 1000
            tpot_ms = (r.last_token_time - r.first_token_time) / (r.output_tokens - 1) * 1000
            if ttft_ms <= slo_ttft_ms and tpot_ms <= slo_tpot_ms:
                met += 1
                tokens += r.output_tokens
        assert level.failed > 0 and level.goodput.met < judged  # the failures count against attainment
        assert (level.goodput.requests, level.goodput.met) == (judged, met)
        assert level.goodput.attainment == pytest.approx(met / judged)
        assert level.goodput.output_goodput == pytest.approx(tokens / level.duration_s)
        assert level.goodput.request_goodput == pytest.approx(met / level.duration_s)
        rows = [row for row in csv_rows if row["level"] == str(level.sessions)]
        assert len(rows) == level.requests
        assert sum(int(row["meets_slo"]) for row in rows) == met
        assert float(level_rows[str(level.sessions)]["slo_attainment"]) == pytest.approx(met / judged, rel=1e-5)
        assert level.ttft_ms.percentiles is not None and set(level.ttft_ms.percentiles) == {"p50", "p99.9"}
        assert level.ttft_ms.percentiles["p50"] == pytest.approx(level.ttft_ms.p50)
    assert "SLO (TTFT <= 60 ms, TPOT <= 10.3 ms)" in proc.stdout


def test_slo_on_ttft_without_streaming_is_refused() -> None:
    proc = bench_in_process("--no-stream", "--slo", "ttft:1s", "--base-url", "http://127.0.0.1:9")
    assert proc.returncode == 2 and "needs streaming" in proc.stderr
