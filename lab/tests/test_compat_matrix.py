"""docs/compatibility.md and README say what the compatibility check prints today.

The rules table is data (fast); the matrix is regenerated from every vLLM release on the package index (slow:
~6-14 MB of Python sources per release, fetched by HTTP range requests and cached under
$KIMI_DFLASH_CACHE/wheels/sparse). When a new vLLM release appears, this fails until the docs are regenerated:
python -m kimi_dflash_lab.matrix --write.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_dflash.rules import engine
from kimi_dflash_lab import matrix
from repo_paths import REPO_ROOT
from rule_example import example_rule_installed


def section(text: str, begin: str, end: str) -> str:
    assert begin in text and end in text, f"markers {begin!r} / {end!r} missing"
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def test_the_rules_table_in_the_docs_is_the_registry() -> None:
    doc = (REPO_ROOT / matrix.DOC).read_text(encoding="utf-8")
    assert section(doc, matrix.RULES_BEGIN, matrix.RULES_END) == matrix.rules_table().strip(), (
        "docs/compatibility.md is out of date: run python -m kimi_dflash_lab.matrix --write"
    )


def test_every_rule_and_its_facts_reach_the_docs_tables() -> None:
    rules = engine.all_rules()
    table = matrix.rules_table()
    assert all(f"| {r.id} | {r.title} |" in table for r in rules)
    assert all(f.label in matrix.runtime_header() for r in rules for f in r.facts)


@pytest.fixture
def example_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with example_rule_installed(tmp_path, monkeypatch) as extra:
        yield extra


def test_a_new_rule_module_reaches_the_rules_table_and_the_runtime_facts(example_rule: Path) -> None:
    """The rule module alone (tests/rule_example.py; its verdict: tests/unit/rules/test_rule_engine.py)."""
    assert "| example drafter rope | the drafter's YaRN amplitude |" in matrix.rules_table()
    assert "no: the amplitude is only wrong in the numbers | vllm #0 |" in matrix.rules_table()
    assert "YaRN amplitude formula" in matrix.runtime_header()


@pytest.mark.slow
def test_the_matrix_in_the_docs_is_what_the_command_prints_today() -> None:
    columns = matrix.build()
    assert columns[0].version == matrix.FIRST_RELEASE and len(columns) >= 19  # 0.20.0 ... 0.33.0 at least
    doc = (REPO_ROOT / matrix.DOC).read_text(encoding="utf-8")
    readme = (REPO_ROOT / matrix.README).read_text(encoding="utf-8")
    stale = "is out of date: run python -m kimi_dflash_lab.matrix --write"
    assert section(doc, matrix.BEGIN, matrix.END) == matrix.render(columns).strip(), f"docs/compatibility.md {stale}"
    assert section(readme, matrix.README_BEGIN, matrix.README_END) == matrix.recommendation(columns).strip(), (
        f"README.md {stale}"
    )
