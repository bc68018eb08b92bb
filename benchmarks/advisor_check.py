#!/usr/bin/env python3
"""The speculative-token advisor's accuracy on points it did not see (the CPU demo by default).

Thin entry point for the lab study ``kimi_dflash_lab.studies.advisor_check`` (run with --help)."""

import sys
from pathlib import Path

_checkout = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_checkout / "src"), str(_checkout / "lab")]

from kimi_dflash.core import options  # noqa: E402

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash_lab.studies.advisor_check", prog="advisor_check.py"))
