#!/usr/bin/env python3
"""Start-up time of the CPU demo, variants interleaved, and whether they answer the same tokens.

Thin entry point for the lab study ``kimi_dflash_lab.studies.demo_startup`` (run with --help)."""

import sys
from pathlib import Path

_checkout = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_checkout / "src"), str(_checkout / "lab")]

from kimi_dflash.core import options  # noqa: E402

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash_lab.studies.demo_startup", prog="demo_startup.py"))
