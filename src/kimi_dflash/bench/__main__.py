"""``python -m kimi_dflash.bench``: the multi-turn benchmark (same as payload/benchmark_multi_turn.py)."""

import sys

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash.bench.cli", prog="python -m kimi_dflash.bench"))
