"""Run a callback right after a module is imported (or now, if it already was): importing vLLM's modules from the
plugin would change vLLM's import order, so runtime patches wait for vLLM to import them. A callback's exception
propagates out of that import: a patch that cannot apply fails loudly."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType

Callback = Callable[[ModuleType], None]

_lock = threading.RLock()


class _AfterImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.pending: dict[str, list[Callback]] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        with _lock:
            if fullname not in self.pending:
                return None
        finders = (finder for finder in sys.meta_path if finder is not self and hasattr(finder, "find_spec"))
        spec = next((found for finder in finders if (found := finder.find_spec(fullname, path, target))), None)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _CallbackLoader(spec.loader, self)
        return spec


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, wrapped: importlib.abc.Loader, finder: _AfterImportFinder) -> None:
        self._wrapped = wrapped
        self._finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._wrapped.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Put the real loader back first: tools like inspect/Triton read source via __loader__.
        module.__loader__ = self._wrapped
        if module.__spec__ is not None:
            module.__spec__.loader = self._wrapped
        self._wrapped.exec_module(module)
        with _lock:
            callbacks = self._finder.pending.pop(module.__name__, [])
        for callback in callbacks:
            callback(module)

    def __getattr__(self, name: str) -> object:
        return getattr(self._wrapped, name)


_finder = _AfterImportFinder()


def when_imported(module_name: str, callback: Callback) -> None:
    """Call `callback(module)` once `module_name` is imported; immediately if it already is."""
    with _lock:
        if (module := sys.modules.get(module_name)) is None:
            _finder.pending.setdefault(module_name, []).append(callback)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    callback(module)
