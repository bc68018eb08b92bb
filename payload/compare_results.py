#!/usr/bin/env python3
"""Compare benchmark result files at matched concurrency (markdown table + PNG plots).

Thin entry point for ``kimi_dflash.bench.compare``; like benchmark_multi_turn.py it falls back to the
repository's ``src/`` when the package is not installed. Plots need matplotlib; the table does not.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import kimi_dflash.bench.compare  # noqa: F401 - installed, or the repository's src/ below
except ImportError:
    _src = Path(__file__).resolve().parent.parent / "src"
    if not (_src / "kimi_dflash" / "bench").is_dir():
        sys.exit(
            f"error: kimi_dflash is not installed and {_src} is missing; copy the whole repository or pip install it"
        )
    sys.path.insert(0, str(_src))

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash.bench.compare"))
