"""kimi-k26-dflash: serve Kimi K2.6 with DFlash speculative decoding through vLLM. Import-light on purpose: the
benchmark (kimi_dflash.bench) must run on a client box with only aiohttp, numpy and pydantic."""

__version__ = "0.1.0"
