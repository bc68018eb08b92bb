"""Dataclasses to JSON, back again with every problem named, and their JSON Schema: one model, three uses.

Supported field types: ``int``, ``float`` (an integer is accepted and stored as float), ``str``, ``bool``,
``Literal[...]`` of strings, ``X | None``, ``list[X]``, ``dict[str, X]``, ``Any`` and nested dataclasses.
A field without a default is required; a field with one may be absent (older files of the same schema
version lack fields added later). Keys a dataclass does not know are ignored: a newer writer of the same
version may add fields. Field documentation lives in ``metadata["doc"]`` (see ``meta``) and feeds
the schema and the generated docs.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Literal, Union

OMIT_IF_NONE = "omit_if_none"
DOC = "doc"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class SchemaError(ValueError):
    """The data does not fit the model; ``problems`` names each mismatch by its JSON path."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def meta(doc: str, *, omit_if_none: bool = False) -> dict[str, Any]:
    """Field metadata: ``field(default=None, metadata=meta("what it is"))``. ``omit_if_none``: the key is
    left out of the JSON when the value is None (for blocks that exist only with an option)."""
    return {DOC: doc, OMIT_IF_NONE: omit_if_none}


def is_required(item: dataclasses.Field[Any]) -> bool:
    return item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotations of a dataclass (``from __future__ import annotations`` leaves strings)."""
    return typing.get_type_hints(cls)


# -- to JSON --------------------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """Plain JSON data (dicts in field order, lists, scalars) from a dataclass tree."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for item in dataclasses.fields(value):
            member = getattr(value, item.name)
            if member is None and item.metadata.get(OMIT_IF_NONE):
                continue
            out[item.name] = to_json(member)
        return out
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


# -- from JSON ------------------------------------------------------------------------------------


def from_json(cls: type, data: Any, where: str = "$") -> Any:
    """Build ``cls`` from JSON data; raises SchemaError listing every mismatch (path: expected, got)."""
    problems: list[str] = []
    value = _decode(cls, data, where, problems)
    if problems:
        raise SchemaError(problems)
    return value


def _union_members(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return typing.get_args(tp)
    return None


def _describe(data: Any) -> str:
    if data is None:
        return "null"
    if isinstance(data, bool):
        return "a boolean"
    if isinstance(data, (int, float)):
        return "a number"
    if isinstance(data, str):
        return f"the string {data[:40]!r}"
    if isinstance(data, list):
        return "an array"
    if isinstance(data, dict):
        return "an object"
    return type(data).__name__


def _decode(tp: Any, data: Any, where: str, problems: list[str]) -> Any:  # one branch per type
    if tp is Any:
        return data
    members = _union_members(tp)
    if members is not None:
        if data is None and type(None) in members:
            return None
        rest = [m for m in members if m is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"{where}: only X | None unions are supported, not {tp}")
        return _decode(rest[0], data, where, problems)
    if dataclasses.is_dataclass(tp):
        return _decode_object(tp, data, where, problems)
    origin = typing.get_origin(tp)
    if origin is Literal:
        if data not in typing.get_args(tp):
            choices = ", ".join(repr(a) for a in typing.get_args(tp))
            problems.append(f"{where}: expected one of {choices}, got {_describe(data)}")
        return data
    if origin is list:
        if not isinstance(data, list):
            problems.append(f"{where}: expected an array, got {_describe(data)}")
            return []
        (item_type,) = typing.get_args(tp)
        return [_decode(item_type, v, f"{where}[{i}]", problems) for i, v in enumerate(data)]
    if origin is dict:
        if not isinstance(data, dict):
            problems.append(f"{where}: expected an object, got {_describe(data)}")
            return {}
        _, value_type = typing.get_args(tp)
        return {k: _decode(value_type, v, f"{where}.{k}", problems) for k, v in data.items()}
    return _decode_scalar(tp, data, where, problems)


def _decode_scalar(tp: Any, data: Any, where: str, problems: list[str]) -> Any:
    if tp is bool:
        ok = isinstance(data, bool)
    elif tp is int:
        ok = isinstance(data, int) and not isinstance(data, bool)
    elif tp is float:
        ok = isinstance(data, (int, float)) and not isinstance(data, bool)
        data = float(data) if ok else data
    elif tp is str:
        ok = isinstance(data, str)
    else:
        raise TypeError(f"{where}: unsupported field type {tp!r}")
    if not ok:
        problems.append(f"{where}: expected {_SCALAR_NAMES[tp]}, got {_describe(data)}")
    return data


_SCALAR_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _decode_object(cls: type, data: Any, where: str, problems: list[str]) -> Any:
    if not isinstance(data, dict):
        problems.append(f"{where}: expected an object, got {_describe(data)}")
        return None
    hints = field_types(cls)
    values: dict[str, Any] = {}
    problems_before = len(problems)
    for item in dataclasses.fields(cls):
        if not item.init:
            continue
        if item.name in data:
            values[item.name] = _decode(hints[item.name], data[item.name], f"{where}.{item.name}", problems)
        elif is_required(item):
            problems.append(f"{where}.{item.name}: missing")
    if len(problems) > problems_before:
        return None  # a broken object is not built; its problems are reported instead
    return cls(**values)


# -- JSON Schema ----------------------------------------------------------------------------------


def json_schema(root: type, *, title: str) -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) of ``root`` and every dataclass it contains, in ``$defs``."""
    defs: dict[str, Any] = {}

    def of(tp: Any) -> dict[str, Any]:  # one branch per type
        if tp is Any:
            return {}
        members = _union_members(tp)
        if members is not None:
            return {"anyOf": [of(m) for m in members]}
        if tp is type(None):
            return {"type": "null"}
        if dataclasses.is_dataclass(tp):
            name = tp.__name__
            if name not in defs:
                defs[name] = {}  # placeholder: stops recursion
                defs[name] = object_schema(tp)
            return {"$ref": f"#/$defs/{name}"}
        origin = typing.get_origin(tp)
        if origin is Literal:
            return {"enum": list(typing.get_args(tp))}
        if origin is list:
            return {"type": "array", "items": of(typing.get_args(tp)[0])}
        if origin is dict:
            return {"type": "object", "additionalProperties": of(typing.get_args(tp)[1])}
        return {"type": {bool: "boolean", int: "integer", float: "number", str: "string"}[tp]}

    def object_schema(cls: type) -> dict[str, Any]:
        hints = field_types(cls)
        properties = {}
        for item in dataclasses.fields(cls):
            properties[item.name] = {**of(hints[item.name]), "description": item.metadata.get(DOC, "")}
        return {
            "type": "object",
            "description": first_line(cls.__doc__),
            "properties": properties,
            "required": [f.name for f in dataclasses.fields(cls) if is_required(f)],
        }

    top = object_schema(root)
    return {"$schema": JSON_SCHEMA_DIALECT, "title": title, **top, "$defs": defs}


def first_line(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())


def type_name(tp: Any) -> str:
    """A short human-readable type for the docs: ``float | null``, ``list[Distribution]``, ``{str: int}``."""
    if tp is Any:
        return "any"
    members = _union_members(tp)
    if members is not None:
        return " | ".join(type_name(m) for m in members)
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return tp.__name__
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(f'"{a}"' for a in typing.get_args(tp))
    if origin is list:
        return f"list[{type_name(typing.get_args(tp)[0])}]"
    if origin is dict:
        return f"{{str: {type_name(typing.get_args(tp)[1])}}}"
    return {bool: "bool", int: "int", float: "float", str: "str"}[tp]
