"""How a config key is declared: an attribute of the settings class (config/schema.py), its annotation the type,
its `key(...)` default the rest; `keys_of` reads them back. `X | None` is optional: an empty value means "unset /
let vLLM decide", not an empty string."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kimi_dflash.core.redaction import MASK

KeyType = Literal["str", "int", "float", "bool", "enum", "path"]
SCALARS: dict[object, KeyType] = {str: "str", int: "int", float: "float", bool: "bool", Path: "path"}
OptionStyle = Literal["value", "switch", "switch_or_no", "composite"]
# Values of another key that count as "not set" for VllmOption.only_with / only_without.
UNSET_VALUES = (None, False, "", "none", "off")


@dataclass(frozen=True)
class VllmOption:
    """The `vllm serve` option a key becomes, and when the launch plan writes it (plan.py reads this; the reverse
    map from an option to its key, which compatibility findings use to name the key to change, is built from it).

    style: value        `FLAG VALUE` (floats written with %g)
           switch       `FLAG` when the value is true
           switch_or_no `FLAG` when true, `--no-<flag>` when false (both stated: vLLM's default may change)
           composite    written by plan.py from this key and others (--speculative-config from the speculative
                        keys); named here so that the option maps back to its key
    """

    flag: str
    style: OptionStyle = "value"
    omit: tuple[object, ...] = ()  # values meaning "let vLLM decide": no option (None always omits a value option)
    gpu_only: bool = False  # not on DEVICE=cpu (the CPU build has no such setting, or refuses it)
    only_with: str | None = None  # another key that must be set (not in UNSET_VALUES)
    only_without: str | None = None  # another key that must be unset
    also: tuple[str, ...] = ()  # further options a composite writes
    note: str = ""  # what a composite writes, in words (the config reference shows it)

    @property
    def flags(self) -> tuple[str, ...]:
        negated = ("--no-" + self.flag.removeprefix("--"),) if self.style == "switch_or_no" else ()
        return (self.flag, *negated, *self.also)


@dataclass(frozen=True)
class Key:
    """One config key as declared: the env-file name is the attribute's in upper case."""

    attribute: str
    type: KeyType
    default: object
    doc: str
    group: str
    choices: tuple[str, ...] = ()
    optional: bool = False
    minimum: float | None = None
    maximum: float | None = None
    multiple_of: int | None = None
    secret: bool = False
    redact: Callable[[str], str] | None = None  # what a value may show of itself when it is stored or printed
    vllm: VllmOption | None = None  # the vLLM option this key becomes (None: an environment variable, or ours)
    speculative_field: str | None = None  # the --speculative-config field it fills (with speculation on)

    @property
    def name(self) -> str:
        return self.attribute.upper()

    def shown(self, value: object) -> str:
        """The value as a file may keep it or a message show it: a secret's as the mask."""
        text = "" if value is None else str(value)
        return MASK if self.secret and text else self.redact(text) if self.redact else text

    @property
    def default_text(self) -> str | None:
        """The default as a config file writes it ("true", "8262"); None when unset."""
        if self.default is None:
            return None
        return str(self.default).lower() if isinstance(self.default, bool) else str(self.default)


def key(
    default: object,
    group: str,
    doc: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    multiple_of: int | None = None,
    secret: bool = False,
    redact: Callable[[str], str] | None = None,
    vllm: VllmOption | None = None,
    speculative_field: str | None = None,
) -> Any:
    """The declaration of one key, written as the attribute's default (a dataclass field carrying the rest)."""
    facts = {name: value for name, value in locals().items() if name != "default"}  # every argument but default
    return dataclasses.field(default=default, metadata={"key": facts})


def keys_of(settings: type) -> tuple[Key, ...]:
    hints = typing.get_type_hints(settings)
    keys = []
    for field in dataclasses.fields(settings):
        hint = hints[field.name]
        optional = type(None) in typing.get_args(hint)
        base = next(arg for arg in typing.get_args(hint) if arg is not type(None)) if optional else hint
        choices = typing.get_args(base) if typing.get_origin(base) is Literal else ()
        kind = "enum" if choices else SCALARS[base]
        keys.append(Key(field.name, kind, field.default, choices=choices, optional=optional, **field.metadata["key"]))
    return tuple(keys)
