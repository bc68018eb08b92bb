#!/usr/bin/env python3
"""Acceptance per draft position of the lab's two yarn drafters on the CPU demo at both DRAFTER_ROPE_AMPLITUDE values.

Thin entry point for the lab study ``kimi_dflash_lab.studies.drafter_rope`` (run with --help)."""

import sys
from pathlib import Path

_checkout = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_checkout / "src"), str(_checkout / "lab")]

from kimi_dflash.core import options  # noqa: E402

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash_lab.studies.drafter_rope", prog="drafter_rope.py"))
