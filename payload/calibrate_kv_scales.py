#!/usr/bin/env python3
"""Calibrate per-layer FP8 KV scales for an MLA model (Kimi K2.6): see --help.

Thin entry point; the work is in kimi_dflash.fp8.calibrate.
"""

from kimi_dflash.fp8.calibrate import main

if __name__ == "__main__":
    raise SystemExit(main())
