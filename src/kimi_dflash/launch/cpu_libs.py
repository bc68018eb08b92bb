"""The libraries vLLM's CPU build wants preloaded (libiomp5, tcmalloc): found on the machine, outside the pure plan."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

SYSTEM_LIBRARY_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)
TCMALLOC_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so.4", "libtcmalloc.so")
IOMP_NAME = "libiomp5.so"
OPENMP_MARKERS = ("libiomp", "libgomp", "libomp")  # how vLLM-CPU recognises an OpenMP runtime in LD_PRELOAD


def find_intel_openmp(prefixes: Iterable[Path]) -> Path | None:
    """libiomp5.so in the lib/ of the Python environment that will run vLLM (where intel-openmp installs it)."""
    return next((path for prefix in prefixes if (path := prefix / "lib" / IOMP_NAME).is_file()), None)


def find_tcmalloc(directories: Iterable[str] = SYSTEM_LIBRARY_DIRS) -> Path | None:
    candidates = (Path(directory) / name for directory in directories for name in TCMALLOC_NAMES)
    return next((path for path in candidates if path.is_file()), None)


def cpu_preload_libraries(python_prefixes: Sequence[Path] | None = None) -> tuple[Path, ...]:
    """tcmalloc first (it must own malloc from the start), then Intel OpenMP; each only when found."""
    prefixes = python_prefixes if python_prefixes is not None else (Path(sys.prefix), Path(sys.base_prefix))
    found = (find_tcmalloc(), find_intel_openmp(prefixes))
    return tuple(path for path in found if path is not None)


def merged_ld_preload(libraries: Sequence[Path], inherited: str | None = None) -> tuple[str, ...]:
    """Our libraries, then whatever LD_PRELOAD already held (without duplicates). One OpenMP runtime per process:
    when LD_PRELOAD already names one (vLLM-CPU adds PyTorch's libgomp to its own process's environment, so a child
    of any process that imported it inherits that), ours is left out; vLLM's multiprocess CPU executor refuses two
    (utils/ompmultiprocessing.py: `assert not (self.use_iomp and self.use_gomp)`)."""
    inherited = os.environ.get("LD_PRELOAD", "") if inherited is None else inherited
    kept = list(filter(None, inherited.replace(" ", ":").split(":")))
    ours = [str(path) for path in libraries]
    another_openmp = any(marker in Path(lib).name for lib in kept if lib not in ours for marker in OPENMP_MARKERS)
    return tuple(dict.fromkeys([*(lib for lib in ours if not (another_openmp and IOMP_NAME in lib)), *kept]))


def describe(libraries: Sequence[Path]) -> str:
    names = {path.name for path in libraries}
    missing = []
    if not names & set(TCMALLOC_NAMES):
        missing.append("tcmalloc (apt-get install libtcmalloc-minimal4)")
    if IOMP_NAME not in names:
        missing.append("Intel OpenMP (pip install intel-openmp into the vLLM environment)")
    found = ", ".join(str(path) for path in libraries) or "nothing"
    return f"CPU preload: {found}" + (f"; not found: {'; '.join(missing)}" if missing else "")
