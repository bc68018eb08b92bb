#!/usr/bin/env python3
"""Fabricate the CPU demo models (tiny Qwen3 target + DFlash drafter); same as python -m kimi_dflash.demo."""

import sys

from kimi_dflash.demo.cli import main

if __name__ == "__main__":
    sys.exit(main())
