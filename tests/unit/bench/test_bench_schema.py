"""The result file's one typed model: its loader and its versioning rules (the docs generated from it are the
lab's: lab/tests/test_docgen.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench_helpers import EXAMPLE_RESULT
from kimi_dflash.bench.result import SCHEMA_VERSION, load_result, parse_result
from kimi_dflash.core.atomic_write import write_json_atomic
from kimi_dflash.core.errors import UserError


def example() -> dict[str, Any]:
    return json.loads(EXAMPLE_RESULT.read_text())


def test_shipped_example_is_a_real_run_the_model_reads_without_loss() -> None:
    doc = load_result(EXAMPLE_RESULT)
    assert doc.results and all(level.completed > 0 for level in doc.results)
    assert any(level.spec_decode for level in doc.results)
    assert doc.run.command_line and doc.run.status == "complete"
    assert doc.to_json() == example()  # every field of the file is in the model, in the same order


def test_a_newer_version_is_refused_with_the_way_out(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "future.json", dict(example(), schema_version=SCHEMA_VERSION + 1))
    with pytest.raises(UserError, match=rf"schema_version {SCHEMA_VERSION + 1} was written by a newer .*Upgrade"):
        load_result(tmp_path / "future.json")
    with pytest.raises(UserError, match="schema_version 0 is unknown"):
        parse_result(dict(example(), schema_version=0))
    with pytest.raises(UserError, match="not an integer"):
        parse_result(dict(example(), schema_version="1"))


def test_files_that_are_not_results_are_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_result(tmp_path / "junk.json")
    with pytest.raises(UserError, match="result file .*: no such file"):
        load_result(tmp_path / "missing.json")
    with pytest.raises(UserError, match="not a benchmark result"):
        parse_result({"schema": "something-else", "schema_version": 1})


def test_every_problem_is_named_by_its_json_path() -> None:
    broken = example()
    broken["results"][0]["output_tok_s"] = "fast"
    del broken["results"][1]["ttft_ms"]["p50"]
    broken["results"][1]["spec_decode"]["per_position"] = [0.5, None]
    broken["run"]["status"] = "finished"
    with pytest.raises(UserError, match=r"not a valid result file: ") as refused:
        parse_result(broken)
    problems = str(refused.value)
    assert "$.results[0].output_tok_s: expected a number, got the string 'fast'" in problems
    assert "$.results[1].ttft_ms.p50: missing" in problems
    assert "$.results[1].spec_decode.per_position[1]: expected a number, got null" in problems
    assert "$.run.status: expected one of 'running'" in problems


def test_fields_added_later_or_unknown_keep_the_version_readable() -> None:
    older = example()
    # a version-1 file from before these fields existed: readers get their defaults
    for level in older["results"]:
        for key in ("client_send_ms", "per_turn", "repeat_results", "cancelled"):
            del level[key]
    del older["settings"]["prompt_order"], older["warmup"]
    doc = parse_result(copy.deepcopy(older))
    level = doc.results[0]
    assert level.client_send_ms is None and level.per_turn == [] and level.cancelled is None
    assert doc.settings.prompt_order is None and doc.warmup is None
    # a newer writer of the same version may add fields: this reader ignores them
    newer = dict(example(), extra_block={"x": 1})
    newer["results"][0]["new_metric"] = 1.5
    assert parse_result(newer).results[0].output_tok_s == example()["results"][0]["output_tok_s"]
