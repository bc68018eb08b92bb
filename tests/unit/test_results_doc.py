"""README's Results section is what benchmarks/render_results.py prints from benchmarks/results/."""

from __future__ import annotations

import json
import subprocess
import sys

from kimi_dflash.bench.result import load_result
from kimi_dflash.results_doc import BEGIN, END, REPORTED_SCHEMA, render_block
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
RESULTS = ROOT / "benchmarks" / "results"


def test_readme_results_equal_what_the_generator_prints() -> None:
    printed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "render_results.py")], capture_output=True,
                             text=True, check=True, timeout=60).stdout  # fmt: skip
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block == "\n" + printed, "README is stale: run python benchmarks/render_results.py --write"
    assert printed == render_block(RESULTS)


def test_measured_results_carry_their_full_settings() -> None:
    measured = [p for p in RESULTS.glob("*.json") if json.loads(p.read_text("utf-8"))["schema"] != REPORTED_SCHEMA]
    assert measured, "benchmarks/results/ holds no measured result"
    for path in measured:
        result = load_result(path)
        assert result.run.status == "complete"
        assert result.server_config is not None and result.server_config.values["DEVICE"] == "cpu", path
        assert result.settings.max_tokens and result.settings.sessions


def test_reported_figures_are_labelled_as_not_ours() -> None:
    recipe = json.loads((RESULTS / "recipe-mi300x.json").read_text("utf-8"))
    assert recipe["measured_by_this_project"] is False and recipe["provenance"]
    assert "not measured by this project" in render_block(RESULTS)
