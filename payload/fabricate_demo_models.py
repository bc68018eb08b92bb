#!/usr/bin/env python3
"""Fabricate the CPU demo models (tiny Qwen3 target + DFlash drafter); same as python -m kimi_dflash.demo."""

import sys

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash.demo.cli", prog="fabricate_demo_models"))
