"""The drafter shoot-out on the real CPU demo: `qualify configs/demo-cpu.env --candidates
configs/demo-cpu.env,configs/demo-cpu-eagle3.env --budget 4m30s` (the budget trims every extra k and the lowest
concurrency level: three server starts, the reference's and one per candidate, at 2 and 4 sessions). Two drafter kinds
(DFlash and EAGLE3-MLA) for the miniature Kimi, each token-identical to the reference at T=0, both accepted,
ranked at the matched concurrency; exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kimi_dflash.bench.result import load_result
from repo_paths import REPO_ROOT

LAUNCHER = REPO_ROOT / "launchers" / "kimi26-vllm-dflash-qualify.sh"
CANDIDATES = ("demo-cpu", "demo-cpu-eagle3")


@pytest.mark.server
@pytest.mark.slow
def test_the_cpu_shoot_out_ranks_two_lossless_drafter_kinds(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("vllm")
    out = tmp_path / "shootout"
    configs = ",".join(f"configs/{name}.env" for name in CANDIDATES)
    done = subprocess.run([str(LAUNCHER), "configs/demo-cpu.env", "--candidates", configs, "--budget", "4m30s", "--out",
                           str(out)], cwd=REPO_ROOT, env={**os.environ, "KIMI_PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=1800, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    state = json.loads((out / "state.json").read_text())
    assert state["plan"]["sessions"] == [2, 4] and state["steps"]["ranking"]["status"] == "done"

    for name, k in zip(CANDIDATES, (4, 3)):
        own = out / "candidates" / name
        verdict = json.loads((own / "lossless" / "verdict.json").read_text())
        assert verdict["verdict"] == "PASS" and verdict["agreement"]["identical"] == verdict["agreement"]["prompts"] > 0
        result = load_result(own / "grid" / f"NUM_SPECULATIVE_TOKENS-{k}.json")
        assert result.server_config.values["SPECULATIVE_METHOD"] == ("dflash" if k == 4 else "eagle3")
        assert [level.sessions for level in result.results] == [2, 4]
        for level in result.results:  # each demo drafter agrees with the target most of the time
            assert len(level.spec_decode.per_position) == k and level.spec_decode.per_position[0] > 0.5
    reference = load_result(out / "grid" / "NUM_SPECULATIVE_TOKENS-0.json")
    assert reference.server_config.values["SPECULATIVE_METHOD"] == "none"

    ranking = json.loads((out / "shootout.json").read_text())
    assert ranking["sessions"] == 4 and sorted(r["rank"] for r in ranking["rows"]) == [1, 2]
    assert {r["method"] for r in ranking["rows"]} == {"dflash", "eagle3"}
    assert all(r["lossless"] == "PASS" and r["speedup"]["sessions"] == 4 for r in ranking["rows"])
    text = (out / "report.md").read_text(encoding="utf-8")
    assert text.splitlines()[0].endswith(": PASS") and "## Ranking" in text
    for name, k in zip(CANDIDATES, (4, 3)):
        assert f"`configs/{name}.env` lossless (T=0 token identity): PASS" in text
        replies = (2 + 4) * 2 * 3  # sessions x 2 turns x 3 repeats: every served reply as the reference's at T=0
        assert f"k={k}: **{replies}/{replies}** identical" in text
