"""Read vLLM's source (a package directory or a wheel, in place) without importing it: parsing takes milliseconds,
importing vllm.config took 10-22 s here. Each file of one source object is read at most once (whoever judges more
than once passes the object on), and each text is parsed once per process (qualify reads through two objects)."""

from __future__ import annotations

import ast
import os
import threading
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.patcher import floor

Reader = Callable[[object], str]

_MAX_ALIAS_DEPTH = 8  # Literal[A, B] where A = Literal[...], possibly imported
# One parse at a time: CPython 3.11 keeps the AST builder's recursion depth interpreter-wide, so two threads parsing
# at once fail with "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905; the dry-engine table
# judges plans from threads sharing one VllmSource, and CI hit it).
_PARSE_LOCK = threading.Lock()
# (relpath, text) -> tree (None: unparsable) for installed packages; a wheel's trees go with its object (the matrix)
_PARSED: dict[tuple[str, str], ast.Module | None] = {}


def _read_file(path: object) -> str:
    return Path(str(path)).read_text(encoding="utf-8", errors="replace")


@dataclass(frozen=True)
class SourceLine:
    path: str
    line: int | None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


class VllmSourceError(ValueError):
    """The path given is not a vLLM source tree we can read."""


class VllmSource:
    """A read-only vLLM source tree. Paths are relative to the distribution root: "vllm/envs.py"."""

    def __init__(self, origin: str, files: dict[str, object], read: Reader, parsed: dict | None = None) -> None:
        self.origin, self._parsed = origin, {} if parsed is None else parsed
        self._files, self._read = files, read
        self._texts: dict[str, str | None] = {}

    @classmethod
    def from_package_dir(cls, package_dir: Path) -> VllmSource:
        """`package_dir` is the `vllm` package directory (what `vllm.__path__[0]` names)."""
        root, files = Path(package_dir).parent, {}
        for folder, _, names in os.walk(package_dir):  # as rglob: links to directories not followed; 2x faster
            prefix = os.path.relpath(folder, root).replace(os.sep, "/")
            files.update({f"{prefix}/{name}": os.path.join(folder, name) for name in names if name.endswith(".py")})
        return cls(str(package_dir), files, _read_file, _PARSED)

    @classmethod
    def from_wheel(cls, wheel: Path) -> VllmSource:
        try:
            archive = zipfile.ZipFile(wheel)
        except (zipfile.BadZipFile, OSError, EOFError) as error:  # empty, truncated, not a zip at all
            raise VllmSourceError(
                f"{wheel} is not a readable wheel ({error}); download it again (pip download vllm==VERSION "
                "--no-deps) or pass the unpacked `vllm` directory"
            ) from None
        files: dict[str, object] = {n: n for n in archive.namelist() if n.startswith("vllm/") and n.endswith(".py")}
        if not files:
            raise VllmSourceError(f"{wheel} holds no vllm/ sources; is it a vLLM wheel?")
        return cls(str(wheel), files, lambda handle: archive.read(str(handle)).decode("utf-8", errors="replace"))

    @classmethod
    def open(cls, path: Path | str) -> VllmSource:
        """The `vllm` package directory, a directory holding it, or a .whl."""
        path = Path(path).expanduser().resolve()
        if path.is_file() and path.suffix == ".whl":
            return cls.from_wheel(path)
        for candidate in (path, path / "vllm"):
            if (candidate / "__init__.py").is_file() and (candidate / "config").is_dir():
                return cls.from_package_dir(candidate)
        raise VllmSourceError(
            f"{path} is not a vLLM package: expected the `vllm` directory (holding __init__.py and config/), a "
            "directory that contains it (an unpacked wheel, site-packages), or a vllm-*.whl file"
        )

    @classmethod
    def installed(cls, python: str | None = None, env: Mapping[str, str] | None = None) -> VllmSource | None:
        """The vLLM `python` (default: this interpreter) runs, read in place; None when it has none."""
        package = floor.package_dir(python=python, env=env)
        return None if package is None else cls.open(package)

    def has(self, relpath: str) -> bool:
        return relpath in self._files

    def paths(self, under: str = "vllm/") -> Iterator[str]:
        return (p for p in sorted(self._files) if p.startswith(under))

    def text(self, relpath: str) -> str | None:
        if relpath not in self._texts:
            self._texts[relpath] = None if relpath not in self._files else self._read(self._files[relpath])
        return self._texts[relpath]

    def line_of(self, relpath: str, *needles: str) -> SourceLine | None:
        for number, line in enumerate((self.text(relpath) or "").splitlines(), 1):
            if any(needle in line for needle in needles):
                return SourceLine(relpath, number)
        return None

    def tree(self, relpath: str) -> ast.Module | None:
        """None when absent or unparsable; thread-safe (see _PARSE_LOCK)."""
        with _PARSE_LOCK:
            text = self.text(relpath)  # read once per object; parsed once per (relpath, text) in self._parsed
            if text is not None and (relpath, text) not in self._parsed:
                try:
                    self._parsed[relpath, text] = ast.parse(text, filename=relpath)
                except SyntaxError:  # written for a newer Python than this one: treated as not found
                    self._parsed[relpath, text] = None
            return None if text is None else self._parsed[relpath, text]

    def find_module(self, definition: str, under: str = "vllm/") -> str | None:
        """The first module defining `definition` at top level (a comment, docstring or re-export does not count)."""
        for relpath in self.paths(under):
            if definition in (self.text(relpath) or ""):
                node = self._node(relpath, definition)
                if node is not None and not isinstance(node, ast.ImportFrom):
                    return relpath
        return None

    def module_path(self, dotted: str) -> str | None:
        base = dotted.replace(".", "/")
        return next((c for c in (f"{base}.py", f"{base}/__init__.py") if self.has(c)), None)

    def version(self) -> str | None:
        return floor.version(lambda name: self.text(f"vllm/{name}"))

    def literal_values(self, relpath: str, alias: str, depth: int = 0) -> tuple[str, ...] | None:
        """The strings a `Alias = Literal[...]` accepts, following nested aliases (also imported ones)."""
        found = self._resolve(relpath, alias, depth)
        value = None if found is None else getattr(found[1], "value", None)
        return None if value is None else self._literal_expr(found[0], value, depth)

    def class_fields(self, relpath: str, class_name: str) -> tuple[str, ...] | None:
        """Annotated class-body names (dataclass fields), including bases defined in the same module."""
        node = self._node(relpath, class_name)
        if not isinstance(node, ast.ClassDef):
            return None
        inherited = [f for b in node.bases if isinstance(b, ast.Name) for f in self.class_fields(relpath, b.id) or ()]
        own = [s for s in node.body if isinstance(s, ast.AnnAssign) and _name(s.annotation) != "ClassVar"]
        return tuple(dict.fromkeys([*inherited, *(s.target.id for s in own if isinstance(s.target, ast.Name))]))

    def class_constants(self, relpath: str, class_name: str) -> dict[str, tuple[object, int]]:
        """name -> (value, line) of the constants a top-level class body assigns (`X = 4`, `X: int = 4`)."""
        node = self._node(relpath, class_name)
        body = node.body if isinstance(node, ast.ClassDef) else []
        return {
            names[0]: (s.value.value, s.lineno)
            for s in body
            if len(names := _targets(s)) == 1 and isinstance(getattr(s, "value", None), ast.Constant)
        }

    def enum_values(self, relpath: str, class_name: str) -> dict[str, str | None] | None:
        """member -> its string value (None for any other value) of an Enum, e.g. backend class paths."""
        node = self._node(relpath, class_name)
        if not isinstance(node, ast.ClassDef):
            return None
        assigned = (s for s in node.body if isinstance(s, ast.Assign))
        return {name: (_strings([s.value]) or (None,))[0] for s in assigned for name in _targets(s) if name[0] != "_"}

    def dict_keys(self, relpath: str, name: str, function: str | None = None) -> tuple[str, ...] | None:
        """String keys of a `name = {...}` dict literal: top-level, or assigned inside `function` ("Class.method")."""
        if function is None:
            return _keys(getattr(self._node(relpath, name), "value", None))
        scope = self.function(relpath, function)
        assigned = (s for s in ast.walk(scope) if isinstance(s, ast.Assign) and name in _targets(s)) if scope else ()
        return next((_keys(s.value) for s in assigned if isinstance(s.value, ast.Dict)), None)

    def class_list(self, relpath: str, class_name: str, attribute: str, depth: int = 0) -> tuple[str, ...] | None:
        """A class attribute's list of strings, inherited from bases (followed through imports)."""
        found = self._resolve(relpath, class_name, depth)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return None
        for stmt in found[1].body:
            value = getattr(stmt, "value", None) if attribute in _targets(stmt) else None
            if isinstance(value, (ast.List, ast.Tuple)):
                return _strings(value.elts)
        for base in (b for b in found[1].bases if isinstance(b, ast.Name)):
            inherited = self.class_list(found[0], base.id, attribute, depth + 1)
            if inherited is not None:
                return inherited
        return None

    def function(self, relpath: str, name: str) -> ast.FunctionDef | None:
        """`name` may be "Class.method"."""
        tree = self.tree(relpath)
        owner, _, method = name.rpartition(".")
        scope = self._node(relpath, owner) if owner else tree
        body = scope.body if isinstance(scope, (ast.ClassDef, ast.Module)) else []
        return next((s for s in body if isinstance(s, ast.FunctionDef) and s.name == method), None)

    def calls(self, relpath: str, definition: str, callee: str) -> bool | None:
        """Whether a top-level class or function calls `callee` anywhere; None when it is not defined."""
        node = self._node(relpath, definition)
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            return None
        return any(isinstance(n, ast.Call) and _name(n.func) == callee for n in ast.walk(node))

    def assigned_strings(self, relpath: str, name: str) -> tuple[str, ...]:
        """The string constants of a top-level `NAME = frozenset({...})` / set / tuple literal."""
        node = self._node(relpath, name)
        return _strings(ast.walk(node.value)) if isinstance(node, ast.Assign) else ()

    def option_strings(self, relpath: str) -> tuple[str, ...]:
        """Every string constant in the module that looks like a long CLI option ("--x-y")."""
        tree = self.tree(relpath)
        strings = _strings(ast.walk(tree) if tree is not None else ())
        return tuple(dict.fromkeys(s for s in strings if s.startswith("--") and len(s) > 2 and " " not in s))

    def _node(self, relpath: str, name: str) -> ast.stmt | None:
        """The last top-level statement that binds `name` (later bindings win, as at import time)."""
        tree = self.tree(relpath)
        return next((s for s in reversed(tree.body) if _binds(s, name)), None) if tree is not None else None

    def _resolve(self, relpath: str, name: str, depth: int) -> tuple[str, ast.stmt] | None:
        """(module, statement) that defines `name`, following `from x import name` to where it is defined."""
        node = self._node(relpath, name) if depth <= _MAX_ALIAS_DEPTH else None
        if not isinstance(node, ast.ImportFrom):
            return None if node is None else (relpath, node)
        package = Path(relpath).parents[node.level - 1] if node.level else None
        dotted = (node.module or "") if package is None else ".".join([*package.parts, *[node.module or ""]]).strip(".")
        target = self.module_path(dotted)
        original = next((a.name for a in node.names if (a.asname or a.name) == name), name)
        return None if target is None else self._resolve(target, original, depth + 1)

    def _literal_expr(self, relpath: str, expr: ast.expr, depth: int) -> tuple[str, ...] | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return (expr.value,)
        if isinstance(expr, ast.Name):
            return self.literal_values(relpath, expr.id, depth + 1)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            parts = [self._literal_expr(relpath, side, depth) for side in (expr.left, expr.right)]
        elif isinstance(expr, ast.Subscript) and _name(expr.value) == "Literal":
            elements = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            parts = [self._literal_expr(relpath, element, depth) for element in elements]
        else:
            return None
        return None if any(p is None for p in parts) else tuple(dict.fromkeys(v for p in parts for v in p or ()))


def _binds(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, ast.ClassDef):
        return stmt.name == name
    if isinstance(stmt, ast.ImportFrom):
        return any((a.asname or a.name) == name for a in stmt.names)
    # `type X = Literal[...]` (Python 3.12+); by class name so the module parses on 3.10 too.
    alias = type(stmt).__name__ == "TypeAlias" and getattr(getattr(stmt, "name", None), "id", None) == name
    return alias or name in _targets(stmt)


def _targets(stmt: ast.AST) -> list[str]:
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    return [stmt.target.id] if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) else []


def _name(expr: ast.expr) -> str | None:
    """`x` of `x`, `a.x`, `x[...]` and `a.x[...]` (a callee, a `Literal[...]`, a `ClassVar[...]`)."""
    expr = expr.value if isinstance(expr, ast.Subscript) else expr
    return expr.id if isinstance(expr, ast.Name) else getattr(expr, "attr", None)


def _strings(nodes: Iterable[ast.AST]) -> tuple[str, ...]:
    return tuple(n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str))


def _keys(value: object) -> tuple[str, ...] | None:
    return _strings(k for k in value.keys if k is not None) if isinstance(value, ast.Dict) else None
