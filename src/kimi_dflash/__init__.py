"""kimi-k26-dflash: serve Kimi K2.6 with DFlash speculative decoding through vLLM.

Kept import-light on purpose: the benchmark (kimi_dflash.bench) must run on a client box
that has only aiohttp, numpy and pydantic installed.
"""

__version__ = "0.1.0"
