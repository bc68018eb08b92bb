#!/usr/bin/env python3
"""How late does the open-loop scheduler send? Send-time lag at high request rates.

Thin entry point for the lab study ``kimi_dflash_lab.studies.open_loop_overhead`` (run with --help)."""

import sys
from pathlib import Path

_checkout = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_checkout / "src"), str(_checkout / "lab")]

from kimi_dflash.core import options  # noqa: E402

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash_lab.studies.open_loop_overhead", prog="open_loop_overhead.py"))
