"""No import circle among a package's modules (issue 26, item 6: preflight/accelerators.py -> host.py ->
runtime_probe.py -> accelerators.py was one). Every import counts: at module level, inside a function (lazy) and
under TYPE_CHECKING, since each says the two modules need each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from repo_paths import REPO_ROOT

SRC = REPO_ROOT / "src"
PACKAGES = ("kimi_dflash.preflight", "kimi_dflash.rules")


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (any kind of import, anywhere in the file)."""
    root = src / package.replace(".", "/")
    modules = {
        ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__"): path
        for path in root.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path that ends where it starts, or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return stack[stack.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_the_modules_of_a_package_form_no_import_circle(package: str) -> None:
    cycle = find_cycle(import_graph(SRC, package))
    assert cycle is None, " -> ".join(cycle or ())


def test_a_lazy_or_type_only_import_back_is_a_circle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "accelerators.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.host import HostProbe\n"
    )
    (package / "host.py").write_text("def runtime():\n    from pkg.runtime_probe import probe\n")
    (package / "runtime_probe.py").write_text("from pkg.accelerators import Accelerator\n")
    assert find_cycle(import_graph(tmp_path, "pkg")) == [
        "pkg.accelerators",
        "pkg.host",
        "pkg.runtime_probe",
        "pkg.accelerators",
    ]
