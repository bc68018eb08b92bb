#!/usr/bin/env python3
"""Thin entry point for the kimi-dflash vLLM patcher (see docs/patches.md, or run with --help).

Works from a checkout without installing the project: falls back to <repo>/src on sys.path.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from kimi_dflash.core import options
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash.patcher.cli", prog="patch_dflash_rocm.py"))
