"""The patch floor: the first vLLM whose source carries the upstream fix of every patch in the registry.

At or above it none of the patch machinery is loaded (serve, rules, plugin). Decided by a probe of the source
(vllm #48520, 0.26.0), never by the version string; a slow test checks every release's wheel. Standard library only.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
from pathlib import Path

RELEASE = "0.26.0"  # where the probe first matches (read from the wheels); for messages only
PATH = "model_executor/layers/attention/attention.py"  # relative to the vllm package
PATTERN = r"assert not self\.attn_backend\.is_mla\(\)"
WHAT = "the sliding-window check asks the layer's backend (is_mla())"
UPSTREAM = "#48520"


def holds(text: str | None) -> bool:
    """Whether a tree whose PATH file reads `text` (None: no such file) is at or above the floor."""
    return text is not None and re.search(PATTERN, text, flags=re.MULTILINE) is not None


def describe() -> str:
    return f"at or above the patch floor (vLLM {RELEASE}: {WHAT}, vllm {UPSTREAM})"


def package_at_floor(package_dir: Path | None) -> bool:
    """Whether the `vllm` package directory is at or above the floor (False when there is none to read)."""
    path = None if package_dir is None else Path(package_dir) / PATH
    try:
        return path is not None and holds(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return False


def package_dir(given: Path | None = None) -> Path | None:
    """The `vllm` package directory: `given` (the package, or a directory holding it), else the vllm this process
    runs or would import, located without importing it; None when there is none."""
    if given is not None:
        given = Path(given).expanduser()
        return given / "vllm" if not (given / "__init__.py").is_file() and (given / "vllm").is_dir() else given
    module = sys.modules.get("vllm")
    if module is not None and getattr(module, "__path__", None):
        return Path(next(iter(module.__path__)))
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def log_at_floor(package: Path) -> None:
    """The plugin's status line in a vLLM process at or above the floor (the same logger and prefix as below it)."""
    version = getattr(sys.modules.get("vllm"), "__version__", None) or "?"
    logging.getLogger("vllm.plugins.kimi_dflash").info(
        "kimi-dflash patches (vLLM %s at %s): nothing to do: %s", version, package, describe()
    )
