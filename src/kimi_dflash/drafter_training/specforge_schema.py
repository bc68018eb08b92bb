"""Does this SpecForge take the run config we generate? Its pydantic models (`extra="forbid"`) read as source from
the installed package or its wheel: no torch, GPU or SpecForge import needed."""

from __future__ import annotations

import ast
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_MODULE = "specforge/config/schema.py"
ROOT_MODEL = "Config"


class SchemaError(ValueError):
    """SpecForge's package could not be read."""


@dataclass(frozen=True)
class Field:
    nested: str | None  # name of the model class this field holds (alone, optional or in a list)
    choices: tuple[str, ...] = ()  # Literal[...] options


@dataclass(frozen=True)
class SpecForgeSchema:
    version: str
    origin: str
    models: Mapping[str, Mapping[str, Field]]  # class name -> field name -> Field
    algorithms: frozenset[str]  # training.strategy values it registers (empty: the catalog was unreadable, not checked)

    def problems(self, document: Mapping[str, Any]) -> list[str]:
        """Every key of `document` this SpecForge does not know, and every value outside a Literal's choices."""
        found: list[str] = []
        self._walk(document, ROOT_MODEL, "", found)
        strategy = (document.get("training") or {}).get("strategy")
        if self.algorithms and strategy is not None and strategy not in self.algorithms:
            found.append(f"training.strategy={strategy!r}: this SpecForge registers {sorted(self.algorithms)}")
        return found

    def _walk(self, document: Mapping[str, Any], model: str, prefix: str, found: list[str]) -> None:
        fields = self.models[model]
        for key, value in document.items():
            path = f"{prefix}{key}"
            spec = fields.get(key)
            if spec is None:
                found.append(f"{path}: unknown to SpecForge {self.version} ({model} has no field {key!r})")
                continue
            if spec.choices and value is not None and str(value) not in spec.choices:
                found.append(f"{path}={value!r}: SpecForge {self.version} accepts {list(spec.choices)}")
            if spec.nested is None or value is None:
                continue
            items = value if isinstance(value, list) else [value]
            for index, item in enumerate(items):
                if isinstance(item, Mapping):
                    where = f"{path}[{index}]." if isinstance(value, list) else f"{path}."
                    self._walk(item, spec.nested, where, found)


def _annotation_models(annotation: ast.expr, known: set[str]) -> str | None:
    names = {node.id for node in ast.walk(annotation) if isinstance(node, ast.Name)}
    nested = sorted(names & known)
    return nested[0] if nested else None


def _literal_choices(annotation: ast.expr) -> tuple[str, ...]:
    for node in ast.walk(annotation):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return tuple(str(e.value) for e in elements if isinstance(e, ast.Constant))
    return ()


def _models(source: str) -> dict[str, dict[str, Field]]:
    """Class name -> field name -> Field of every class a schema module declares (pydantic's model_config aside)."""
    classes = [node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)]
    known = {node.name for node in classes}
    models: dict[str, dict[str, Field]] = {}
    for node in classes:
        models[node.name] = fields = {}
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                annotation = statement.annotation
                nested = _annotation_models(annotation, known - {node.name})
                fields[statement.target.id] = Field(nested, _literal_choices(annotation))
        fields.pop("model_config", None)
    return models


BUILTIN_CATALOG = "specforge/algorithms/builtin.py"
# `from specforge.algorithms.dflash.providers import create_registration as dflash`
_REGISTRATION_IMPORT = re.compile(r"from specforge\.algorithms\.([a-z0-9_]+)\.providers import create_registration")

METADATA = re.compile(r"^specforge-[^/]+\.dist-info/METADATA$")


def read_schema(location: Path) -> SpecForgeSchema:
    """The schema of the SpecForge at `location`: a .whl, a site-packages directory or the `specforge` package."""
    location = Path(location)
    if location.is_file() and location.suffix == ".whl":
        with zipfile.ZipFile(location) as wheel:
            wanted = [
                name for name in wheel.namelist() if name in (SCHEMA_MODULE, BUILTIN_CATALOG) or METADATA.match(name)
            ]
            files = {name: wheel.read(name).decode("utf-8") for name in wanted}
        origin = str(location)
        missing = (
            f"{location}: no {SCHEMA_MODULE} in this wheel; not a SpecForge 0.2-style package (the per-method "
            "training scripts of older SpecForge are not supported)"
        )
    else:
        root = location.parent if location.name == "specforge" else location
        paths = [root / SCHEMA_MODULE, root / BUILTIN_CATALOG, *root.glob("specforge-*.dist-info/METADATA")]
        files = {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in paths if p.is_file()}
        origin = str(root / SCHEMA_MODULE)
        missing = (
            f"{location}: no {SCHEMA_MODULE} there; point at SpecForge's site-packages (the setup phase installs it) "
            "or at a specforge-*.whl"
        )
    if SCHEMA_MODULE not in files:
        raise SchemaError(missing)
    metadata = [text for name, text in sorted(files.items()) if METADATA.match(name)]
    version = re.search(r"^Version:\s*(\S+)", metadata[-1], flags=re.MULTILINE) if metadata else None
    algorithms = frozenset(_REGISTRATION_IMPORT.findall(files.get(BUILTIN_CATALOG, "")))
    models = _models(files[SCHEMA_MODULE])
    if not models.get(ROOT_MODEL):
        layout = "this SpecForge's config layout is not the one this project generates for (SpecForge 0.2.x)"
        raise SchemaError(f"{origin}: no `class {ROOT_MODEL}` with fields in {SCHEMA_MODULE}; {layout}")
    return SpecForgeSchema(version.group(1) if version else "unknown", origin, models, algorithms)
