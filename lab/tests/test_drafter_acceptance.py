"""The drafter acceptance table (kimi_dflash_lab.studies.drafter_acceptance), on result files the repository keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_dflash_lab.studies.drafter_acceptance import rows

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "shootout-cpu" / "results"


def test_each_drafter_gets_a_row_with_its_acceptance_per_position() -> None:
    eagle3, dflash = RESULTS / "demo-cpu-eagle3-vm-qualify-k3.json", RESULTS / "demo-cpu-vm-qualify-k2.json"
    table = rows([("eagle3", str(eagle3)), ("dflash", str(dflash))])
    assert table[0].startswith("| drafter |") and len(table) == 4
    assert table[2].startswith("| eagle3 |") and table[2].count("%,") == 2
    assert table[3].startswith("| dflash |") and table[3].count("%,") == 1


def test_a_run_without_speculation_is_named() -> None:
    with pytest.raises(SystemExit, match="no speculative decoding counters"):
        rows([("baseline", str(RESULTS / "demo-cpu-vm-qualify-k0.json"))])
