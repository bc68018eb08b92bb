#!/usr/bin/env python3
"""Client capacity: how many concurrent streams benchmark_multi_turn.py follows on one core with <= 2 %
distortion, next to `vllm bench serve` on the same synthetic server in the same run.

Thin entry point for ``kimi_dflash.instruments.capacity`` (run with --help). Needs the dev environment
(vLLM installed for the comparison; --no-vllm measures only our client). Takes a few minutes.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import kimi_dflash.instruments.capacity as _capacity
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    import kimi_dflash.instruments.capacity as _capacity

if __name__ == "__main__":
    sys.exit(_capacity.main())
