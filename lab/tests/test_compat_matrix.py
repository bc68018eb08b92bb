"""docs/compatibility.md and README say what the compatibility check finds.

The rules table comes from the rules' declarations, the matrix, the runtime facts and README's "Which vLLM" from the
committed per-release facts (lab/kimi_dflash_lab/compat_releases.json): both are regenerated offline by
`python -m kimi_dflash_lab docs` and checked here (fast). The slow test reads every vLLM release on the package index
again (~6-14 MB of Python sources per release, fetched by HTTP range requests and cached under
$KIMI_DFLASH_CACHE/wheels/sparse) and fails when the committed facts differ: a new release, or a rule that judges
a release otherwise, until `python -m kimi_dflash_lab matrix --write`.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_dflash.patcher import floor
from kimi_dflash.rules import engine
from kimi_dflash_lab import matrix
from repo_paths import REPO_ROOT
from rule_example import example_rule_installed

STALE = "is out of date: run python -m kimi_dflash_lab docs"


def section(text: str, begin: str, end: str) -> str:
    assert begin in text and end in text, f"markers {begin!r} / {end!r} missing"
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def test_the_docs_are_the_declarations_and_the_committed_release_facts() -> None:
    doc = (REPO_ROOT / matrix.DOC).read_text(encoding="utf-8")
    readme = (REPO_ROOT / matrix.README).read_text(encoding="utf-8")
    columns = matrix.load()
    assert columns[0].version == floor.OLDEST and len(columns) >= 19  # 0.20.0 ... 0.33.0 at least
    assert section(doc, matrix.RULES_BEGIN, matrix.RULES_END) == matrix.rules_table().strip(), f"docs {STALE}"
    assert section(doc, matrix.BEGIN, matrix.END) == matrix.render(columns).strip(), f"docs {STALE}"
    assert section(doc, matrix.RUNTIME_BEGIN, matrix.RUNTIME_END) == matrix.runtime_table(columns).strip()
    assert section(readme, matrix.README_BEGIN, matrix.README_END) == matrix.recommendation(columns).strip()


def test_the_docs_regenerate_offline_from_the_committed_facts(tmp_path: Path) -> None:
    doc, readme = tmp_path / "compatibility.md", tmp_path / "README.md"
    shutil.copy(REPO_ROOT / matrix.DOC, doc)
    shutil.copy(REPO_ROOT / matrix.README, readme)
    for path, begin, end in ((doc, matrix.BEGIN, matrix.END), (readme, matrix.README_BEGIN, matrix.README_END)):
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(section(text, begin, end), "stale"), encoding="utf-8")
    assert matrix.write_docs(doc, readme) == [doc, readme]  # no wheel, no index: matrix.build is never called
    assert doc.read_text() == (REPO_ROOT / matrix.DOC).read_text()
    assert readme.read_text() == (REPO_ROOT / matrix.README).read_text()


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
    assert "| ? |" in matrix.runtime_table(matrix.load())  # not read from the wheels yet: matrix --write does


@pytest.mark.slow
def test_the_committed_release_facts_are_what_the_wheels_give_today() -> None:
    columns = matrix.build()
    assert matrix.dump(columns) == matrix.RELEASES.read_text(encoding="utf-8"), (
        f"{matrix.RELEASES.name} is out of date: run python -m kimi_dflash_lab matrix --write"
    )
