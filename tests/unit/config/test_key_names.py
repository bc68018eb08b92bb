"""Config keys are named through the schema: `KEY.<NAME>` for a name, `config.typed` or `typed_values` for a value
(the schema's default), never a key's name in quotes outside config/schema.py, so a typo fails where it is read and a
default is stated once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kimi_dflash.config.schema import KEY, KEYS_BY_NAME
from kimi_dflash.config.validate import typed_values
from repo_paths import REPO_ROOT

SRC = REPO_ROOT / "src" / "kimi_dflash"
# The key names a file may still quote, each with its reason (keep this short; empty today).
ALLOWED: dict[str, tuple[set[str], str]] = {}


def quoted_keys(text: str) -> list[tuple[int, str]]:
    """(line, name) of every string constant, f-string parts included, that is a config key's name."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in KEYS_BY_NAME
    ]


def undeclared_names(text: str) -> list[tuple[int, str]]:
    """(line, name) of every `KEY.<name>` the schema does not declare (code that never runs is read too)."""
    return [
        (node.lineno, node.attr)
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "KEY"
        and node.attr not in KEYS_BY_NAME
    ]


def _sources() -> list[tuple[str, str]]:
    return [(path.relative_to(SRC).as_posix(), path.read_text(encoding="utf-8")) for path in sorted(SRC.rglob("*.py"))]


def test_no_config_key_is_named_in_quotes_outside_the_schema() -> None:
    found = [
        f"{name}:{line}: {key!r}"
        for name, text in _sources()
        if name != "config/schema.py"
        for line, key in quoted_keys(text)
        if key not in ALLOWED.get(name, (set(), ""))[0]
    ]
    assert found == [], "name these keys as KEY.<NAME> (config/schema.py), or read config.typed"
    for name, (keys, _) in ALLOWED.items():  # an allowance nothing uses any more goes
        assert {key for _, key in quoted_keys((SRC / name).read_text(encoding="utf-8"))} >= keys, name


def test_every_key_named_through_the_schema_is_declared() -> None:
    assert [(name, found) for name, text in _sources() if (found := undeclared_names(text))] == []


def test_the_checks_see_quoted_keys_and_undeclared_names() -> None:
    probe = 'X = {"PORT": 1}\nY = f"{a or \'HOST\'}: the PORT"\nZ = KEY.PORT, KEY.PROT, "HOSTS"\n'
    assert quoted_keys(probe) == [(1, "PORT"), (2, "HOST")]
    assert undeclared_names(probe) == [(3, "PROT")]


def test_key_gives_a_declared_name_and_refuses_a_typo() -> None:
    assert KEY.NUM_SPECULATIVE_TOKENS == "NUM_SPECULATIVE_TOKENS" == KEYS_BY_NAME[KEY.NUM_SPECULATIVE_TOKENS].name
    with pytest.raises(AttributeError, match="NUM_SPECULATIVE_TOKEN"):
        _ = KEY.NUM_SPECULATIVE_TOKEN


def test_typed_values_types_text_as_a_config_file_does_with_the_schemas_defaults() -> None:
    typed = typed_values({"MAX_NUM_SEQS": "4", "ENFORCE_EAGER": "False", "MODEL_DIR": "", "NOT_A_KEY": "x"})
    assert (typed.max_num_seqs, typed.enforce_eager, typed.model_dir) == (4, False, None)
    assert typed.device == KEYS_BY_NAME[KEY.DEVICE].default and typed.kv_cache_dtype == "auto"
    assert typed_values({"KV_SCALES_FILE": "/tmp/s.json"}).kv_scales_file == Path("/tmp/s.json").resolve()
    with pytest.raises(ValueError, match="MAX_NUM_SEQS=0: out of range"):
        typed_values({"MAX_NUM_SEQS": "0"})
