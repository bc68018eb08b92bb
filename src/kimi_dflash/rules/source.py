"""Read vLLM's source without importing it: an installed package directory or a wheel read in place, so the same
probes answer for the vLLM that will run and for any release downloaded to compare against. Parsing with `ast`
costs milliseconds; importing vllm.config took 10-22 s on this project's 2-core machine.

One source object per vLLM tree per process (`VllmSource.open`), each file read and parsed at most once: serve's
preflight, its patch step and the checks of qualify all share it.
"""

from __future__ import annotations

import ast
import re
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Turns a file handle (a Path, or a member name inside the wheel) into the file's text.
Reader = Callable[[object], str]

_VERSION_RE = re.compile(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""")
# How deep Literal aliases may nest (Literal[A, B] where A = Literal[...], possibly imported).
_MAX_ALIAS_DEPTH = 8
# One parse at a time in this interpreter. CPython 3.11 keeps the AST builder's recursion depth in the ast module's
# interpreter-wide state, not per thread: two threads parsing at once, with a garbage collection running Python code
# in between, fail with "SystemError: AST constructor recursion depth mismatch" (reproduced here; the same error is
# reported from threaded programs in CPython gh-106905 and pytest #10763). The dry-engine table judges plans from
# threads that share one VllmSource; CI hit exactly this.
_PARSE_LOCK = threading.Lock()
_OPENED: dict[str, VllmSource] = {}  # resolved path -> the one source object for that tree in this process


@dataclass(frozen=True)
class SourceLine:
    """Where a fact was read: a file of the vLLM tree and, when one line says it, that line."""

    path: str
    line: int | None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


def forget(path: Path | str) -> None:
    """Drop the shared source object of a tree that was just written to (file patches), so the next open reads it."""
    resolved = Path(path).expanduser().resolve()
    for key in (str(resolved), str(resolved / "vllm")):
        _OPENED.pop(key, None)


class VllmSourceError(ValueError):
    """The path given is not a vLLM source tree we can read."""


class VllmSource:
    """A read-only vLLM source tree. Paths are relative to the distribution root: "vllm/envs.py"."""

    def __init__(self, origin: str, files: dict[str, object], read: Reader) -> None:
        self.origin = origin
        self._files = files
        self._read = read
        self._texts: dict[str, str | None] = {}
        self._trees: dict[str, ast.Module | None] = {}

    @classmethod
    def from_package_dir(cls, package_dir: Path) -> VllmSource:
        """`package_dir` is the `vllm` package directory (what `vllm.__path__[0]` names)."""
        package_dir = Path(package_dir)
        root = package_dir.parent
        files: dict[str, object] = {p.relative_to(root).as_posix(): p for p in package_dir.rglob("*.py") if p.is_file()}
        return cls(
            str(package_dir), files, lambda handle: Path(str(handle)).read_text(encoding="utf-8", errors="replace")
        )

    @classmethod
    def from_wheel(cls, wheel: Path) -> VllmSource:
        try:
            archive = zipfile.ZipFile(wheel)
        except (zipfile.BadZipFile, OSError, EOFError) as error:  # empty, truncated, not a zip at all
            raise VllmSourceError(
                f"{wheel} is not a readable wheel ({error}); download it again (pip download vllm==VERSION "
                "--no-deps) or pass the unpacked `vllm` directory"
            ) from None
        files: dict[str, object] = {
            name: name for name in archive.namelist() if name.startswith("vllm/") and name.endswith(".py")
        }
        if not files:
            raise VllmSourceError(f"{wheel} holds no vllm/ sources; is it a vLLM wheel?")
        return cls(str(wheel), files, lambda handle: archive.read(str(handle)).decode("utf-8", errors="replace"))

    @classmethod
    def open(cls, path: Path | str) -> VllmSource:
        """A vLLM given the way people name one: the `vllm` package directory, a directory holding it (an
        unpacked wheel, a site-packages), or a .whl file; the same object for the same tree on every call.
        VllmSourceError names what was expected."""
        path = Path(path).expanduser().resolve()
        if path.is_file() and path.suffix == ".whl":
            return _OPENED.get(str(path)) or _OPENED.setdefault(str(path), cls.from_wheel(path))
        for candidate in (path, path / "vllm"):
            if (candidate / "__init__.py").is_file() and (candidate / "config").is_dir():
                key = str(candidate)
                return _OPENED.get(key) or _OPENED.setdefault(key, cls.from_package_dir(candidate))
        raise VllmSourceError(
            f"{path} is not a vLLM package: expected the `vllm` directory (holding __init__.py and config/), a "
            "directory that contains it (an unpacked wheel, site-packages), or a vllm-*.whl file"
        )

    def has(self, relpath: str) -> bool:
        return relpath in self._files

    def paths(self, under: str = "vllm/") -> Iterator[str]:
        return (p for p in sorted(self._files) if p.startswith(under))

    def text(self, relpath: str) -> str | None:
        if relpath not in self._texts:
            handle = self._files.get(relpath)
            self._texts[relpath] = None if handle is None else self._read(handle)
        return self._texts[relpath]

    def line_of(self, relpath: str, *needles: str) -> SourceLine | None:
        """The first line of a file that holds one of `needles` (a fact's file:line), None when no line does."""
        for number, line in enumerate((self.text(relpath) or "").splitlines(), 1):
            if any(needle in line for needle in needles):
                return SourceLine(relpath, number)
        return None

    def tree(self, relpath: str) -> ast.Module | None:
        """The parsed module, or None when absent or unparsable. Safe to call from several threads: each file is
        parsed once, and never while another thread parses (see _PARSE_LOCK)."""
        with _PARSE_LOCK:
            if relpath not in self._trees:
                text = self.text(relpath)
                try:
                    self._trees[relpath] = None if text is None else ast.parse(text, filename=relpath)
                except SyntaxError:  # written for a newer Python than this one: treated as not found
                    self._trees[relpath] = None
            return self._trees[relpath]

    def find_module(self, definition: str, under: str = "vllm/") -> str | None:
        """The first module under `under` that defines `definition` at top level.

        `definition` is a class name or an assigned name. A cheap substring test picks candidates; the AST
        confirms, so a mention in a comment or docstring does not count.
        """
        for relpath in self.paths(under):
            text = self.text(relpath)
            if text is None or definition not in text:
                continue
            tree = self.tree(relpath)
            node = None if tree is None else _top_level(tree, definition)
            if node is not None and not isinstance(node, ast.ImportFrom):  # re-exports do not count
                return relpath
        return None

    def module_path(self, dotted: str) -> str | None:
        base = dotted.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if self.has(candidate):
                return candidate
        return None

    # --- facts ---------------------------------------------------------------------------------------

    def literal_values(self, relpath: str, alias: str) -> tuple[str, ...] | None:
        """The strings a `Alias = Literal[...]` accepts, following nested aliases (also imported ones)."""
        return self._literal_values(relpath, alias, 0)

    def class_fields(self, relpath: str, class_name: str) -> tuple[str, ...] | None:
        """Annotated class-body names (dataclass fields), including bases defined in the same module."""
        tree = self.tree(relpath)
        node = None if tree is None else _top_level(tree, class_name)
        if not isinstance(node, ast.ClassDef):
            return None
        names: list[str] = []
        for base in node.bases:
            if isinstance(base, ast.Name):
                names.extend(self.class_fields(relpath, base.id) or ())
        for stmt in node.body:
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and not _is_classvar(stmt.annotation)
            ):
                names.append(stmt.target.id)
        return tuple(dict.fromkeys(names))

    def class_constants(self, relpath: str, class_name: str) -> dict[str, tuple[object, int]]:
        """name -> (value, line) of the constants a top-level class body assigns (`X = 4`, `X: int = 4`)."""
        tree = self.tree(relpath)
        node = None if tree is None else _top_level(tree, class_name)
        constants: dict[str, tuple[object, int]] = {}
        for stmt in node.body if isinstance(node, ast.ClassDef) else ():
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            value = getattr(stmt, "value", None)
            if len(targets) == 1 and isinstance(targets[0], ast.Name) and isinstance(value, ast.Constant):
                constants[targets[0].id] = (value.value, stmt.lineno)
        return constants

    def enum_members(self, relpath: str, class_name: str) -> tuple[str, ...] | None:
        tree = self.tree(relpath)
        node = None if tree is None else _top_level(tree, class_name)
        if not isinstance(node, ast.ClassDef):
            return None
        members = []
        for stmt in node.body:
            if isinstance(stmt, ast.Assign):
                members.extend(t.id for t in stmt.targets if isinstance(t, ast.Name) and not t.id.startswith("_"))
        return tuple(members)

    def dict_keys(self, relpath: str, name: str) -> tuple[str, ...] | None:
        """String keys of a top-level `name = {...}` / `name: T = {...}` dict literal."""
        tree = self.tree(relpath)
        node = None if tree is None else _top_level(tree, name)
        value = getattr(node, "value", None)
        if not isinstance(value, ast.Dict):
            return None
        return tuple(k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))

    def version(self) -> str | None:
        """The release this tree says it is (vllm/_version.py), for labels only: decisions come from features."""
        for relpath in ("vllm/_version.py", "vllm/version.py"):
            text = self.text(relpath)
            match = None if text is None else _VERSION_RE.search(text)
            if match:
                return match.group(1)
        return None

    def class_list(self, relpath: str, class_name: str, attribute: str) -> tuple[str, ...] | None:
        """The strings of a class attribute list (`supported_kv_cache_dtypes: ClassVar[...] = ["auto", ...]`),
        inherited from base classes when the class does not set it (bases followed through imports)."""
        return self._class_list(relpath, class_name, attribute, 0)

    def enum_values(self, relpath: str, class_name: str) -> dict[str, str] | None:
        """member -> string value of an Enum whose members are string constants (e.g. backend class paths)."""
        tree = self.tree(relpath)
        node = None if tree is None else _top_level(tree, class_name)
        if not isinstance(node, ast.ClassDef):
            return None
        values: dict[str, str] = {}
        for stmt in node.body:
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                values.update({t.id: stmt.value.value for t in stmt.targets if isinstance(t, ast.Name)})
        return values

    def function(self, relpath: str, name: str) -> ast.FunctionDef | None:
        """A top-level function (or a method, written "Class.method")."""
        tree = self.tree(relpath)
        if tree is None:
            return None
        owner, _, method = name.rpartition(".")
        scope: list[ast.stmt] = tree.body
        if owner:
            cls = _top_level(tree, owner)
            if not isinstance(cls, ast.ClassDef):
                return None
            scope = cls.body
        for stmt in scope:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == (method or name):
                return stmt
        return None

    def local_dict_keys(self, relpath: str, function: str, variable: str) -> tuple[str, ...] | None:
        """String keys of a dict literal assigned to `variable` inside a function (e.g. a mapping it checks)."""
        node = self.function(relpath, function)
        if node is None:
            return None
        for stmt in ast.walk(node):
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == variable for t in stmt.targets)
            ):
                return tuple(
                    k.value for k in stmt.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                )
        return None

    def calls(self, relpath: str, definition: str, callee: str) -> bool | None:
        """Whether a top-level class or function calls `callee` (by name or as an attribute) anywhere in its
        body; None when the definition is not there."""
        tree = self.tree(relpath)
        node = None if tree is None else _top_level(tree, definition)
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            return None
        return any(isinstance(n, ast.Call) and _callee_name(n.func) == callee for n in ast.walk(node))

    def option_strings(self, relpath: str) -> tuple[str, ...]:
        """Every string constant in the module that looks like a long CLI option ("--x-y")."""
        tree = self.tree(relpath)
        if tree is None:
            return ()
        return tuple(
            dict.fromkeys(
                node.value
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("--")
                and len(node.value) > 2
                and " " not in node.value
            )
        )

    def _class_list(self, relpath: str, class_name: str, attribute: str, depth: int) -> tuple[str, ...] | None:
        if depth > _MAX_ALIAS_DEPTH:
            return None
        tree = self.tree(relpath)
        node = None if tree is None else _top_level(tree, class_name)
        if isinstance(node, ast.ImportFrom):
            target = self._imported_module(relpath, node)
            return (
                None
                if target is None
                else self._class_list(target, _imported_name(node, class_name), attribute, depth + 1)
            )
        if not isinstance(node, ast.ClassDef):
            return None
        for stmt in node.body:
            value = _assigned_value(stmt, attribute)
            if isinstance(value, (ast.List, ast.Tuple)):
                return tuple(e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
        for base in node.bases:
            if isinstance(base, ast.Name):
                inherited = self._class_list(relpath, base.id, attribute, depth + 1)
                if inherited is not None:
                    return inherited
        return None

    def _literal_values(self, relpath: str, alias: str, depth: int) -> tuple[str, ...] | None:
        if depth > _MAX_ALIAS_DEPTH:
            return None
        tree = self.tree(relpath)
        if tree is None:
            return None
        node = _top_level(tree, alias)
        if isinstance(node, (ast.ImportFrom,)):
            target = self._imported_module(relpath, node)
            return None if target is None else self._literal_values(target, _imported_name(node, alias), depth + 1)
        value = getattr(node, "value", None)
        if value is None:
            return None
        return self._literal_expr(relpath, value, depth)

    def _literal_expr(self, relpath: str, expr: ast.expr, depth: int) -> tuple[str, ...] | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return (expr.value,)
        if isinstance(expr, ast.Name):
            return self._literal_values(relpath, expr.id, depth + 1)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            left = self._literal_expr(relpath, expr.left, depth)
            right = self._literal_expr(relpath, expr.right, depth)
            return None if left is None or right is None else left + right
        if isinstance(expr, ast.Subscript) and _subscript_name(expr) == "Literal":
            elements = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            values: list[str] = []
            for element in elements:
                resolved = self._literal_expr(relpath, element, depth)
                if resolved is None:
                    return None
                values.extend(resolved)
            return tuple(dict.fromkeys(values))
        return None

    def _imported_module(self, relpath: str, node: ast.ImportFrom) -> str | None:
        if node.level == 0:
            return self.module_path(node.module or "")
        package = Path(relpath).parent
        for _ in range(node.level - 1):
            package = package.parent
        dotted = package.as_posix().replace("/", ".") + (f".{node.module}" if node.module else "")
        return self.module_path(dotted)


def _top_level(tree: ast.Module, name: str) -> ast.stmt | None:
    """The last top-level statement that binds `name` (later bindings win, as at import time)."""
    found: ast.stmt | None = None
    for stmt in tree.body:
        if _binds(stmt, name):
            found = stmt
    return found


def _binds(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, ast.ClassDef):
        return stmt.name == name
    if isinstance(stmt, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name
    if isinstance(stmt, ast.ImportFrom):
        return any((a.asname or a.name) == name for a in stmt.names)
    # `type X = Literal[...]` (Python 3.12+); by class name so the module parses on 3.10 too.
    return type(stmt).__name__ == "TypeAlias" and getattr(getattr(stmt, "name", None), "id", None) == name


def _assigned_value(stmt: ast.stmt, name: str) -> ast.expr | None:
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
        return stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
        return stmt.value
    return None


def _callee_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _imported_name(node: ast.ImportFrom, local: str) -> str:
    for alias in node.names:
        if (alias.asname or alias.name) == local:
            return alias.name
    return local


def _subscript_name(expr: ast.Subscript) -> str | None:
    value = expr.value
    if isinstance(value, ast.Name):
        return value.id
    if isinstance(value, ast.Attribute):
        return value.attr  # typing.Literal
    return None


def _is_classvar(annotation: ast.expr) -> bool:
    target = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
    return name == "ClassVar"
