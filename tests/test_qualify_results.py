"""A qualify run's result files, copied into benchmarks/results/, render in README's Results section: in a table of
their own (config, device, host and workload differ from the demo's), the demo's table unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kimi_dflash.qualify.bundle import result_name
from kimi_dflash.results_doc import render_block

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _as_gpu_run(source: Path, k: str) -> dict:
    """A demo result dressed as a qualify run of production.env on another box (only the labels change)."""
    document = json.loads(source.read_text("utf-8"))
    document["server_config"]["config"] = "configs/production.env"
    document["server_config"]["values"]["DEVICE"] = "rocm"
    document["server_config"]["overrides"] = {"NUM_SPECULATIVE_TOKENS": k}
    document["tool"]["host"] = "mi300x-box"
    return document


def test_qualify_results_render_in_their_own_table_beside_the_demo(tmp_path: Path) -> None:
    for path in RESULTS.glob("*.json"):
        shutil.copy(path, tmp_path)
    before = render_block(tmp_path)
    for k in ("0", "2"):
        name = result_name("configs/production.env", k, host="mi300x-box")
        (tmp_path / name).write_text(json.dumps(_as_gpu_run(RESULTS / f"demo-cpu-k{k}.json", k)))
    after = render_block(tmp_path)
    heading = "**Measured with this project's `qualify` on mi300x-box (rocm): `production.env`.**"
    assert after.count(heading) == 1 and before.count(heading) == 0
    demo_table = before.split("**Kimi K2.6")[0]
    assert demo_table in after  # the demo's table is untouched
    own = after.split(heading, 1)[1].split("**Kimi K2.6")[0]
    # Its rows are compared with its own k=0 at equal concurrency, not with the demo's.
    assert own.count("| NUM_SPECULATIVE_TOKENS=2 |") == 2 and own.count("x |") == 2
    assert own.count("| NUM_SPECULATIVE_TOKENS=") == 4
