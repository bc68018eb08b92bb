"""One raw setting -> the typed value its key declares (config/schema.py), or the problem with it and the fix."""

from __future__ import annotations

import difflib
from pathlib import Path

from kimi_dflash.config.declare import Key
from kimi_dflash.config.loader import RawSetting
from kimi_dflash.config.problems import Problem
from kimi_dflash.core.formatting import general

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def convert(spec: Key, setting: RawSetting) -> tuple[object, Problem | None]:
    raw = setting.value.strip()

    def bad(message: str, fix: str) -> tuple[object, Problem]:
        return None, Problem(setting.source, spec.name, setting.value, message, fix)

    if raw == "":
        if spec.optional:
            return None, None
        default = spec.default_text or "unset"
        return bad("empty value", f"set a value ({_describe(spec)}) or delete the line to use the default ({default})")

    if spec.type == "bool":
        if (lowered := raw.lower()) in TRUE_WORDS | FALSE_WORDS:
            return lowered in TRUE_WORDS, None
        return bad("not a boolean", "use true or false")
    if spec.type == "enum":
        if raw in spec.choices:
            return raw, None
        close = difflib.get_close_matches(raw, spec.choices, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return bad(f"not one of {', '.join(spec.choices)}{hint}", f"use one of: {', '.join(spec.choices)}")
    if spec.type == "path":
        path = Path(raw).expanduser()
        return (path if path.is_absolute() else (setting.base_dir / path)).resolve(), None
    if spec.type == "str":
        return raw, None

    try:
        value: int | float = int(raw, 10) if spec.type == "int" else float(raw)
    except ValueError:
        what = "a whole number" if spec.type == "int" else "a number"
        return bad(f"not {what}", f"use {'an integer' if spec.type == 'int' else 'a number'}, {_describe(spec)}")
    if value != value or value in (float("inf"), float("-inf")):
        return bad("not a finite number", f"use a number, {_describe(spec)}")
    if spec.minimum is not None and value < spec.minimum or spec.maximum is not None and value > spec.maximum:
        return bad("out of range", f"use a value {_describe(spec)}")
    if spec.multiple_of and int(value) % spec.multiple_of:
        suggestion = max(int(value) // spec.multiple_of * spec.multiple_of, spec.multiple_of)
        return bad(f"not a multiple of {spec.multiple_of}", f"use a multiple of {spec.multiple_of}, e.g. {suggestion}")
    return value, None


def _describe(spec: Key) -> str:
    if spec.choices:
        return "one of " + ", ".join(spec.choices)
    parts = []
    if spec.minimum is not None and spec.maximum is not None:
        parts.append(f"from {general(spec.minimum)} to {general(spec.maximum)}")
    if spec.multiple_of:
        parts.append(f"a multiple of {spec.multiple_of}")
    return " and ".join(parts) or spec.type
