#!/usr/bin/env python3
"""Calibrate per-layer FP8 KV scales for an MLA model (Kimi K2.6): see --help.

Thin entry point; the work is in kimi_dflash.fp8.calibrate.
"""

import sys

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash.fp8.calibrate", prog="calibrate_kv_scales.py"))
