"""The GPU instrument for the KV-scale hook under CUDA/HIP graphs (studies/kv_hook_graph.py) keeps working on
the CPU: its eager part runs the real wrapper against the stand-in MLA write, and the scale it reads back follows
the running amax of the valid rows and freezes after the warm-up (the graph part needs a GPU; its results from an
H100 are in benchmarks/results/kv-hook-graph/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repo_paths import REPO_ROOT

pytest.importorskip("torch")


def test_the_eager_part_follows_the_running_amax_and_freezes(tmp_path: Path) -> None:
    from kimi_dflash.core import options
    from kimi_dflash_lab.studies import kv_hook_graph

    out = tmp_path / "kv.json"
    assert (
        options.run(
            kv_hook_graph, ["--cpu", "--writes", "12", "--warmup-writes", "5", "--tokens", "8", "--json", str(out)]
        )
        == 0
    )
    found = json.loads(out.read_text())["correctness"]
    scales = found["eager_scales"]
    assert found["eager_matches_expected"] and len(scales) == 12
    assert scales[5:] == [scales[4]] * 7  # frozen after the fifth write
    assert scales[4] > scales[0]  # and it had followed the rising amax until then
    # The padding row (slot -1, value 1e4) never reached the scale: it would have set it to 1e4 / 448.
    assert max(scales) < 1e4 / 448


def test_the_gpu_results_say_graph_replay_equals_eager() -> None:
    results = REPO_ROOT / "benchmarks" / "results" / "kv-hook-graph"
    documents = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
    assert documents and all(d["device"].startswith("NVIDIA") for d in documents)
    for d in documents:
        check = d["correctness"]
        assert check["graph_scales_identical"] and check["cache_bytes_identical"] and check["eager_matches_expected"]
        assert check["graph_writes_counted_on_device"] == check["writes"] and check["host_counted_graph_writes"] == 0
