"""README's Results section is what benchmarks/render_results.py prints from benchmarks/results/."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kimi_dflash.bench.result import load_result
from kimi_dflash.core.errors import UserError
from kimi_dflash.results_doc import BEGIN, END, RECIPE_FILE, REPORTED_SCHEMA, recipe_figures, render_block
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
RESULTS = ROOT / "benchmarks" / "results"


def test_readme_results_equal_what_the_generator_prints() -> None:
    printed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "render_results.py")], capture_output=True,
                             text=True, check=True, timeout=60).stdout  # fmt: skip
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block == "\n" + printed, "README is stale: run kimi-dflash results --write README.md"
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
    recipe = recipe_figures()
    assert recipe.measured_by_this_project is False and recipe.provenance
    assert "not measured by this project" in render_block(RESULTS)


def test_the_recipe_figures_ship_in_the_package_once_and_render_for_any_directory(tmp_path) -> None:
    """The package carries the recipe's figures (qualify's report reads them on any install; no checkout reach);
    benchmarks/results/ keeps only what this project measured, so there is one copy."""
    assert not (RESULTS / RECIPE_FILE).exists()
    assert (ROOT / "src" / "kimi_dflash" / "data" / RECIPE_FILE).is_file()
    assert recipe_figures().rows[0].output_tok_s == 507.6
    assert "**Kimi K2.6 + DFlash on 8x AMD MI300X: reported by" in render_block(tmp_path)  # an empty directory


def test_a_reported_figures_file_of_another_shape_is_refused_with_its_path(tmp_path) -> None:
    bad = {"schema": REPORTED_SCHEMA, "schema_version": 1, "title": "x", "rows": "none"}
    (tmp_path / "other.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(UserError, match=r"other.json: not a reported figures .*\$.source: Field required"):
        render_block(tmp_path)
