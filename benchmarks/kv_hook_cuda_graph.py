#!/usr/bin/env python3
"""The FP8 KV-scale hook on a real GPU: eager against a captured CUDA/HIP graph (plain torch, no vLLM).

See kimi_dflash.instruments.kv_hook_graph."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kimi_dflash.instruments.kv_hook_graph import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
