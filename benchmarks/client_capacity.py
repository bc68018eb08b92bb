#!/usr/bin/env python3
"""Client capacity: how many concurrent streams the benchmark follows on one core with <= 2 % distortion,
next to `vllm bench serve` on the same synthetic server in the same run (a few minutes; --no-vllm: ours only).

Thin entry point for the lab study ``kimi_dflash_lab.studies.capacity`` (run with --help)."""

import sys
from pathlib import Path

_checkout = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_checkout / "src"), str(_checkout / "lab")]

from kimi_dflash.core import options  # noqa: E402

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash_lab.studies.capacity", prog="client_capacity.py"))
