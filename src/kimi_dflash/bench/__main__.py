"""``python -m kimi_dflash.bench``: the multi-turn benchmark (same as payload/benchmark_multi_turn.py)."""

import sys

from kimi_dflash.bench.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m kimi_dflash.bench"))
