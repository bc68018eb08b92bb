#!/usr/bin/env python3
"""Pre-shard a checkpoint for one tensor-parallel size (vLLM's sharded_state format): see --help.

Thin entry point; the work is in kimi_dflash.preshard.cli.
"""

from kimi_dflash.preshard.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
