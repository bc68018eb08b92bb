#!/usr/bin/env python3
"""What the FP8 KV-scale hook costs per decode step on real vLLM CPU servers.

Thin entry point for the lab study ``kimi_dflash_lab.studies.kv_hook_cost`` (run with --help)."""

import sys
from pathlib import Path

_checkout = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_checkout / "src"), str(_checkout / "lab")]

from kimi_dflash_lab.studies.kv_hook_cost import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
