#!/usr/bin/env python3
"""The FP8 KV-scale hook on a real GPU: eager against a captured CUDA/HIP graph (plain torch, no vLLM).

Thin entry point for the lab study ``kimi_dflash_lab.studies.kv_hook_graph`` (run with --help)."""

import sys
from pathlib import Path

_checkout = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_checkout / "src"), str(_checkout / "lab")]

from kimi_dflash.core import options  # noqa: E402

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash_lab.studies.kv_hook_graph", prog="kv_hook_cuda_graph.py"))
