"""Instruments that check the product, kept apart from it: a synthetic OpenAI server with exact timing and
injected faults, the client-capacity study and the cross-check against ``vllm bench serve`` (for the benchmark);
the tiny random MLA checkpoint fabricator (tiny_mla, a fixture of the KV-scale quality tests) and the KV-scale
hook's cost benchmark (kv_hook_cost, benchmarks/kv_scale_hook_cost.py).

Arrows point one way: instruments import the product (``kimi_dflash.bench``, ``kvscale``, ``launch``) and may
need vLLM, torch or transformers; nothing in the product imports from here, so ``bench`` stays a client that runs
with aiohttp + numpy only and the wheel's product packages carry no test fixture.
"""
