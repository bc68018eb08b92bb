"""The benchmark and its reports: aiohttp, numpy, pydantic and the standard library only (it runs on a client box)."""
