#!/usr/bin/env python3
"""Pre-shard a checkpoint for one tensor-parallel size (vLLM's sharded_state format): see --help.

Thin entry point; the work is in kimi_dflash.preshard.cli.
"""

import sys

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash.preshard.cli", prog="preshard_kimi26.py"))
