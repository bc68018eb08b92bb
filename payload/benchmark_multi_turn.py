#!/usr/bin/env python3
"""Multi-turn streaming benchmark for vLLM with speculative decoding (kimi-k26-dflash).

Thin entry point: the logic lives in the ``kimi_dflash.bench`` package. On a client box either install
the project without its server dependencies (``pip install --no-deps . && pip install aiohttp numpy pydantic``) or
copy the repository: when the package is not installed, the repository's ``src/`` next to this file is
put on ``sys.path``. Only aiohttp, numpy, pydantic and the standard library are needed. Run with ``--help``.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import kimi_dflash.bench.cli  # noqa: F401 - installed, or the repository's src/ below
except ImportError:
    _src = Path(__file__).resolve().parent.parent / "src"
    if not (_src / "kimi_dflash" / "bench").is_dir():
        sys.exit(
            f"error: kimi_dflash is not installed and {_src} is missing; copy the whole repository or pip install it"
        )
    sys.path.insert(0, str(_src))

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash.bench.cli", prog="benchmark_multi_turn.py"))
