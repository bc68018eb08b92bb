#!/usr/bin/env python3
"""What the FP8 KV-scale hook costs per decode step on real vLLM CPU servers.

Thin entry point for the lab study ``kimi_dflash_lab.studies.kv_hook_cost`` (run with --help)."""

import sys
from pathlib import Path

_checkout = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_checkout / "src"), str(_checkout / "lab")]

from kimi_dflash.core import options  # noqa: E402

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash_lab.studies.kv_hook_cost", prog="kv_scale_hook_cost.py"))
