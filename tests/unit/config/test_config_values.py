"""config/values.py (ConfigValues, the typed view of a config) is generated from config/schema.py: it must stay
in step, and every validated config must fit it."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

from kimi_dflash.config import generate_values
from kimi_dflash.config.schema import KEYS
from kimi_dflash.config.validate import attribute, load_config
from kimi_dflash.config.values import ConfigValues
from repo_paths import REPO_ROOT

CONFIGS = REPO_ROOT / "configs"


def test_values_module_is_generated_from_the_schema() -> None:
    committed = generate_values.module_path().read_text(encoding="utf-8")
    assert committed == generate_values.render(), (
        "config/values.py is out of step with config/schema.py; run "
        "`python -m kimi_dflash.config.generate_values --write`"
    )


def test_one_attribute_per_key_in_schema_order() -> None:
    assert [field.name for field in dataclasses.fields(ConfigValues)] == [attribute(key.name) for key in KEYS]


def test_every_shipped_config_fits_the_typed_view() -> None:
    hints = typing.get_type_hints(ConfigValues)
    for path in sorted(CONFIGS.glob("*.env")):
        typed = load_config(path, environ={}).typed
        for key in KEYS:
            value = getattr(typed, attribute(key.name))
            allowed = typing.get_args(hints[attribute(key.name)]) or (hints[attribute(key.name)],)
            if value is None:
                assert type(None) in allowed, f"{path.name}: {key.name} is empty but not optional"
            elif key.type == "enum":
                assert value in key.choices
            else:
                scalar = {"str": str, "int": int, "float": float, "bool": bool, "path": Path}[key.type]
                assert isinstance(value, scalar) and (key.type == "bool" or not isinstance(value, bool)), (
                    f"{path.name}: {key.name}={value!r} is not a {key.type}"
                )


def test_outside_the_config_package_keys_are_read_typed_not_by_name() -> None:
    """`config.typed.max_num_seqs` is an int the type checker knows; `config["MAX_NUM_SEQS"]` is an object and a
    string a typo breaks at run time. The schema-walking option table in plan.py reads `config.values` by Key."""
    import re

    by_name = re.compile(r"""\bconfig\[\s*["'][A-Z][A-Z_]*["']\s*\]|\.get_(?:str|int)\(\s*["'][A-Z]""")
    src = CONFIGS.parent / "src" / "kimi_dflash"
    found = [
        f"{path.relative_to(src)}:{number}: {line.strip()}"
        for path in sorted(src.rglob("*.py"))
        if "config" not in path.relative_to(src).parts[:1]
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if by_name.search(line)
    ]
    assert found == []
