"""The vLLM releases the project supports, declared once (from OLDEST, the first with DFlash), and where a Python's
vLLM is. The patch floor is the first vLLM whose source carries the upstream fix of every patch in the registry: at or
above it none of the patch machinery is loaded (serve, rules, plugin). Decided by a probe of the source (vllm #48520,
0.26.0), never by the version string; a slow test checks every release's wheel. Standard library only."""

from __future__ import annotations

import importlib.util
import logging
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

OLDEST = "0.20.0"  # the first release with DFlash: the oldest the project supports
RELEASE = "0.26.0"  # where the probe first matches (read from the wheels); for messages only
PATH = "model_executor/layers/attention/attention.py"  # relative to the vllm package
PATTERN = r"assert not self\.attn_backend\.is_mla\(\)"
WHAT = "the sliding-window check asks the layer's backend (is_mla())"
UPSTREAM = "#48520"
VERSIONS = ("_version.py", "version.py")  # the vllm package's files that say its release


def holds(text: str | None) -> bool:
    """Whether a tree whose PATH file reads `text` (None: no such file) is at or above the floor."""
    return text is not None and re.search(PATTERN, text, flags=re.MULTILINE) is not None


def version(read: Callable[[str], str | None]) -> str | None:
    """The release a tree says it is (for labels: decisions come from its source); `read`: a package file's text."""
    found = (re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", read(n) or "") for n in VERSIONS)
    return next((match.group(1) for match in found if match), None)


def describe() -> str:
    return f"at or above the patch floor (vLLM {RELEASE}: {WHAT}, vllm {UPSTREAM})"


def package_at_floor(package_dir: Path | None) -> bool:
    """Whether the `vllm` package directory is at or above the floor (False when there is none to read)."""
    path = None if package_dir is None else Path(package_dir) / PATH
    try:
        return path is not None and holds(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return False


LOCATE = "import importlib.util as u; s = u.find_spec('vllm'); print([*(s and s.submodule_search_locations or '-')][0])"


def package_dir(
    given: Path | None = None, python: str | None = None, env: Mapping[str, str] | None = None
) -> Path | None:
    """The `vllm` package directory: `given` (the package, or a directory holding it), else the vllm `python` (this
    process when None or the same interpreter) runs or would import, located without importing it; None when there
    is none. The one locator of vLLM (serve, the rules, preflight, the patcher, the plugin)."""
    if given is not None:
        given = Path(given).expanduser()
        return given / "vllm" if not (given / "__init__.py").is_file() and (given / "vllm").is_dir() else given
    if python not in (None, sys.executable):
        try:
            found = subprocess.run([python, "-c", LOCATE], capture_output=True, text=True, timeout=60, env=env).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        return None if found.strip() in ("-", "") else Path(found.rstrip("\n"))
    if (module := sys.modules.get("vllm")) is not None and getattr(module, "__path__", None):
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
