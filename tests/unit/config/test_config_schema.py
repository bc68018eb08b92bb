"""config/schema.py declares every key once, as an annotated attribute of ConfigValues: the key table is read back
from the annotations, every declaration is consistent with itself, and every validated config fits the types."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Literal

import pytest

from kimi_dflash.config.declare import Key, VllmOption, key, keys_of
from kimi_dflash.config.schema import DEMO_CHOICES, GROUP_TITLES, KEYS, KEYS_BY_NAME, NO_DEMO, ConfigValues
from kimi_dflash.config.validate import load_config
from repo_paths import REPO_ROOT

CONFIGS = REPO_ROOT / "configs"
PYTHON_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool, "path": Path}


def test_the_key_table_is_read_from_the_annotations() -> None:
    @dataclasses.dataclass(frozen=True)
    class Sample:
        mode: Literal["a", "b"] = key("a", "g", "doc of mode")
        port: int = key(80, "g", "doc of port", minimum=1, maximum=9, multiple_of=2, vllm=VllmOption("--port"))
        where: Path | None = key(None, "g", "doc of where", speculative_field="where")
        level: Literal["x", "y"] | None = key("x", "g", "doc of level", secret=True)
        ratio: float = key(0.5, "g", "doc of ratio")

    mode, port, where, level, ratio = keys_of(Sample)
    assert mode == Key("mode", "enum", "a", "doc of mode", "g", choices=("a", "b"))
    assert port == Key(
        "port", "int", 80, "doc of port", "g", minimum=1, maximum=9, multiple_of=2, vllm=VllmOption("--port")
    )
    assert where == Key("where", "path", None, "doc of where", "g", optional=True, speculative_field="where")
    assert level == Key("level", "enum", "x", "doc of level", "g", choices=("x", "y"), optional=True, secret=True)
    assert (ratio.type, ratio.optional, ratio.name) == ("float", False, "RATIO")


def test_one_key_per_attribute_in_declaration_order() -> None:
    assert [k.attribute for k in KEYS] == [f.name for f in dataclasses.fields(ConfigValues)]
    assert all(k.name == k.attribute.upper() and k.name.isidentifier() for k in KEYS)
    hints = typing.get_type_hints(ConfigValues)  # what a type checker sees of config.typed.<key>
    assert (hints["port"], hints["model_dir"], hints["gpu_memory_utilization"]) == (int, Path | None, float)
    assert KEYS_BY_NAME["DEVICE"].choices == typing.get_args(hints["device"]) == ("rocm", "cuda", "cpu")


@pytest.mark.parametrize("spec", KEYS, ids=lambda k: k.name)
def test_every_declaration_is_consistent(spec: Key) -> None:
    assert spec.group in GROUP_TITLES and spec.doc.strip()
    if spec.default is None:
        assert spec.optional, "an unset default needs an optional (X | None) annotation"
    elif spec.type == "enum":
        assert spec.default in spec.choices
    else:
        python_type = PYTHON_TYPES[spec.type]
        assert isinstance(spec.default, python_type) and (spec.type == "bool" or not isinstance(spec.default, bool))
    if spec.minimum is not None or spec.maximum is not None or spec.multiple_of is not None:
        assert spec.type in ("int", "float") and spec.minimum is not None and spec.maximum is not None
        assert spec.minimum <= spec.maximum
        if isinstance(spec.default, (int, float)):
            assert spec.minimum <= spec.default <= spec.maximum
            assert not spec.multiple_of or spec.default % spec.multiple_of == 0
    if spec.secret:
        assert spec.optional and spec.default is None
    option = spec.vllm
    if option is not None:
        assert option.flag.startswith("--") and all(
            k in KEYS_BY_NAME for k in (option.only_with, option.only_without) if k
        )
        assert (option.style == "composite") == bool(option.note)


def test_options_and_speculative_fields_belong_to_one_key_each() -> None:
    flags = [flag for k in KEYS if k.vllm for flag in k.vllm.flags]
    fields = [k.speculative_field for k in KEYS if k.speculative_field]
    assert len(flags) == len(set(flags)) and len(fields) == len(set(fields))


def test_every_speculative_method_is_one_vllm_keeps_whatever_the_drafters_path_says() -> None:
    """vLLM 0.32 guesses the method from the drafter's path ("eagle3" or "dflash" anywhere in it) unless the method
    is eagle, eagle3, dflash or dspark (config/speculative.py ~l.1326-1343): a choice outside them (draft_model)
    would be served as another method from a path such as ~/.cache/kimi-dflash/... (docs/qualify.md)."""
    assert set(KEYS_BY_NAME["SPECULATIVE_METHOD"].choices) - {"none"} <= {"eagle", "eagle3", "dflash", "dspark"}


def test_the_demo_choices_are_the_catalogs() -> None:
    assert KEYS_BY_NAME["FABRICATE_DEMO_MODELS"].choices == (NO_DEMO, *DEMO_CHOICES)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.env")), ids=lambda p: p.name)
def test_every_shipped_config_fits_the_typed_view(path: Path) -> None:
    hints = typing.get_type_hints(ConfigValues)
    typed = load_config(path, environ={}).typed
    assert isinstance(typed, ConfigValues)
    for spec in KEYS:
        value, allowed = getattr(typed, spec.attribute), typing.get_args(hints[spec.attribute])
        if value is None:
            assert type(None) in allowed, f"{path.name}: {spec.name} is empty but not optional"
        elif spec.type == "enum":
            assert value in spec.choices
        else:
            assert type(value) is PYTHON_TYPES[spec.type] or isinstance(value, Path), f"{spec.name}={value!r}"


def test_outside_the_config_package_keys_are_read_typed_not_by_name() -> None:
    """`config.typed.max_num_seqs` is an int the type checker knows; `config["MAX_NUM_SEQS"]` is an object and a
    string a typo breaks at run time. The schema-walking option table in plan.py reads `config[key.name]`."""
    by_name = re.compile(r"""\bconfig\[\s*["'][A-Z][A-Z_]*["']\s*\]|\.get_(?:str|int)\(\s*["'][A-Z]""")
    src = REPO_ROOT / "src" / "kimi_dflash"
    found = [
        f"{path.relative_to(src)}:{number}: {line.strip()}"
        for path in sorted(src.rglob("*.py"))
        if "config" not in path.relative_to(src).parts[:1]
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if by_name.search(line)
    ]
    assert found == []
