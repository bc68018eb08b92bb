"""Instruments that check the benchmark, kept apart from it: a synthetic OpenAI server with exact timing and
injected faults, the client-capacity study and the cross-check against ``vllm bench serve``.

Arrows point one way: instruments import ``kimi_dflash.bench`` (and may need vLLM, the demo models, ...);
``bench`` never imports anything from here, so it stays a client that runs with aiohttp + numpy only.
"""
