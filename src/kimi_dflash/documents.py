"""The JSON documents the workflows write and read back: pydantic models with a schema name and version, read
through ``core.user_files``, written atomically. A file without ``"schema"`` reads as version 1 (written before
its kind was typed); types are strict; unknown keys are ignored (a newer writer of the same version may add them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from kimi_dflash.core.atomic_write import write_json_atomic
from kimi_dflash.core.user_files import MiB, UnreadableFile, read_user_json

Json = dict[str, JsonValue]
D = TypeVar("D", bound="Document")


class Model(BaseModel):
    """A typed part of a document: unknown keys ignored, strict types."""

    model_config = ConfigDict(extra="ignore")


class Document(Model):
    SCHEMA: ClassVar[str]
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "document"  # its role in messages ("qualify state file")
    MAX_BYTES: ClassVar[int] = 64 * MiB
    MODE: ClassVar[int | None] = None  # a new file's mode (None: atomic_write's)

    def to_json(self) -> Json:
        return {"schema": self.SCHEMA, "schema_version": self.VERSION, **self.model_dump(mode="json")}

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_json(), mode=self.MODE)

    @classmethod
    def parse(cls: type[D], data: JsonValue, where: str) -> D:
        """The document in ``data`` (JSON read from ``where``); ``UnreadableFile`` naming what is wrong."""
        refusal = f"{where}: not a {cls.WHAT} this version of kimi-dflash reads"
        if not isinstance(data, dict):
            raise UnreadableFile(f"{refusal} (the document is {type(data).__name__}, not an object)")
        fields = {key: value for key, value in data.items() if key not in ("schema", "schema_version")}
        schema, version = data.get("schema", cls.SCHEMA), data.get("schema_version", 1)
        if schema != cls.SCHEMA:
            raise UnreadableFile(f"{refusal} (schema {schema!r}, not {cls.SCHEMA!r})")
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= cls.VERSION:
            raise UnreadableFile(f"{refusal} (schema_version {version!r}; this one reads 1 to {cls.VERSION})")
        try:
            return cls.model_validate_json(json.dumps(fields), strict=True)
        except ValidationError as error:
            problems = [f"$.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()]
            shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
            raise UnreadableFile(f"{refusal} ({shown})") from None

    @classmethod
    def load(cls: type[D], path: Path, *, follow_symlinks: bool = True) -> D:
        data = read_user_json(path, what=cls.WHAT, max_bytes=cls.MAX_BYTES, follow_symlinks=follow_symlinks)
        return cls.parse(data, f"{cls.WHAT} {path}")

    @classmethod
    def load_or_none(cls: type[D], path: Path) -> D | None:
        """The document, or None when the file is missing or not one (a reader that can do without it)."""
        try:
            return cls.load(path)
        except UnreadableFile:
            return None
