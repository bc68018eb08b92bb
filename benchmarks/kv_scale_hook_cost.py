#!/usr/bin/env python3
"""What the FP8 KV-scale hook costs per decode step on real vLLM CPU servers.

See kimi_dflash.instruments.kv_hook_cost."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kimi_dflash.instruments.kv_hook_cost import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
