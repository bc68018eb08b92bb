"""Field metadata for the result model's dataclasses, in pydantic's vocabulary: pydantic reads a dataclass
field's ``metadata`` as ``Field(...)`` arguments, so the description feeds the JSON Schema and the docs."""

from __future__ import annotations

import dataclasses
from typing import Any


def _is_none(value: Any) -> bool:
    return value is None


def meta(doc: str, *, omit_if_none: bool = False) -> dict[str, Any]:
    """A field's metadata: ``doc`` what it is; ``omit_if_none``: the key is left out of the JSON when the value is
    None (for blocks that exist only with an option)."""
    return {"description": doc, "exclude_if": _is_none} if omit_if_none else {"description": doc}


def doc(
    text: str, *, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING, omit_if_none: bool = False
) -> Any:
    """A described dataclass field: ``count: int | None = doc("number of values", default=None)``."""
    return dataclasses.field(default=default, default_factory=factory, metadata=meta(text, omit_if_none=omit_if_none))
