"""The benchmark (payload/benchmark_multi_turn.py) and its reports. Runs with aiohttp + numpy + stdlib only.

Layers: workload (prompt set, seeded session plans) -> http1 / client (one keep-alive connection per
session, raw timestamps) -> records -> response / sse (stream interpretation) -> metrics, prometheus
(pure functions) -> result (the typed result model, its schema version and loader; typed_json maps it
to JSON and JSON Schema) -> report (writing, tables) -> runner, progress -> cli. compare / plots turn
result files into a matched-concurrency report (matplotlib only there). Importing this package imports
nothing heavy, and nothing here imports from outside it: the instruments that check the benchmark (the
synthetic server, the capacity study, the cross-check against ``vllm bench serve``) live in
``kimi_dflash.instruments`` and depend on this package, never the other way round.
"""
