"""The benchmark (payload/benchmark_multi_turn.py, kimi-dflash bench) and its reports, on aiohttp + numpy + pydantic
+ the standard library only (a client box); matplotlib only for compare's plots.

It imports nothing of the project but the standard-library leaf ``kimi_dflash.core``: the instruments that check
it (synthetic server, capacity study, cross-check against ``vllm bench serve``) live in ``kimi_dflash_lab``.
"""
