"""The shipped prompt set and the seeded session plans."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kimi_dflash.bench.workload import BUILTIN, load_dataset, session_prompts, warmup_prompts
from kimi_dflash.core.errors import UserError
from repo_paths import REPO_ROOT

CATEGORIES = ("reasoning", "math", "code", "writing", "multilingual")


def test_builtin_prompt_set_is_large_diverse_and_unique() -> None:
    ds = load_dataset(BUILTIN)
    assert len(ds.prompts) >= 200
    counts = ds.describe().categories
    assert set(counts) == set(CATEGORIES)
    assert min(counts.values()) >= 30
    texts = [p.text for p in ds.prompts]
    assert len(set(texts)) == len(texts)
    assert len({p.id for p in ds.prompts}) == len(texts)
    # multilingual means non-Latin scripts too (CJK, Cyrillic, Arabic, Devanagari ...)
    multilingual = [p.text for p in ds.prompts if p.category == "multilingual"]
    scripts = {
        "cjk": r"[\u4e00-\u9fff]", "kana": r"[\u3040-\u30ff]", "hangul": r"[\uac00-\ud7af]",
        "cyrillic": r"[\u0400-\u04ff]", "arabic": r"[\u0600-\u06ff]", "devanagari": r"[\u0900-\u097f]",
    }  # fmt: skip
    assert all(any(re.search(rx, t) for t in multilingual) for rx in scripts.values())


def test_session_plans_are_deterministic_and_distinct() -> None:
    ds = load_dataset(BUILTIN)
    a = session_prompts(ds, seed=1, level=8, repeat=0, session=3, turns=5)
    assert a == session_prompts(ds, seed=1, level=8, repeat=0, session=3, turns=5)
    assert len({p.id for p in a}) == 5  # no prompt twice in one conversation
    assert a != session_prompts(ds, seed=2, level=8, repeat=0, session=3, turns=5)
    assert a != session_prompts(ds, seed=1, level=8, repeat=1, session=3, turns=5)
    assert a != session_prompts(ds, seed=1, level=8, repeat=0, session=4, turns=5)
    assert len(warmup_prompts(ds, 0, 500)) == 500  # more than the set: it cycles


def test_sequential_order_sends_every_prompt_once_per_repeat() -> None:
    ds = load_dataset(BUILTIN)
    small = type(ds)(name="x", prompts=ds.prompts[:12], sha256="")
    for repeat in (0, 1):
        plans = [session_prompts(small, 0, 4, repeat, s, 3, "sequential") for s in range(4)]
        sent = [p.id for plan in plans for p in plan]
        assert sorted(sent) == sorted(p.id for p in small.prompts)  # each once
        assert [plan[0].id for plan in plans] == [p.id for p in small.prompts[:4]]  # first wave = file order


def test_jsonl_dataset(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "one", "category": "x"}\n\n"two"\n', encoding="utf-8")
    ds = load_dataset(str(path))
    assert [p.text for p in ds.prompts] == ["one", "two"]
    assert len(ds.sha256) == 64


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "ok"}\n{"text": "no prompt key"}\n', "line 2"),
        ('{"prompt": "ok"}\nnot json\n', "line 2: not valid JSON"),
        ("", "no prompts"),
        ('{"prompt": ""}\n', "non-empty"),
    ],
)
def test_bad_datasets_name_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        load_dataset(str(path))


def test_missing_dataset_file() -> None:
    with pytest.raises(UserError, match="no such file"):
        load_dataset("/nonexistent/prompts.jsonl")


def test_prompt_file_is_valid_jsonl_with_required_fields() -> None:
    raw = REPO_ROOT / "src/kimi_dflash/bench/data/prompts.jsonl"
    for line in raw.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        assert set(item) == {"id", "category", "prompt"}


def test_prompt_set_is_declared_as_package_data() -> None:
    """`pip install .` must ship the prompt set: pyproject's package-data has to cover bench/data/."""
    import fnmatch

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package_data = pyproject.get("tool", {}).get("setuptools", {}).get("package-data", {})
    covered = any(fnmatch.fnmatch("bench/data/prompts.jsonl", p) for p in package_data.get("kimi_dflash", [])) or any(
        fnmatch.fnmatch("data/prompts.jsonl", p) for p in package_data.get("kimi_dflash.bench", [])
    )
    assert covered, 'add "bench/data/*" to [tool.setuptools.package-data] kimi_dflash in pyproject.toml'
