"""The benchmark (payload/benchmark_multi_turn.py, kimi-dflash bench) and its reports. Runs with aiohttp + numpy
+ pydantic + the standard library only.

Layers: workload (prompt set, seeded session plans) -> http1 / client (one keep-alive connection per
session, raw timestamps) -> records -> response / sse (stream interpretation) -> metrics, prometheus
(pure functions) -> result (the typed result model, its schema version and loader; pydantic's TypeAdapter
validates it and maps it to JSON and JSON Schema) -> report (writing, tables) -> runner, progress -> cli.
compare / plots turn result files into a matched-concurrency report (matplotlib only there). Importing this
package imports nothing heavy, and it imports nothing of the project but the standard-library leaf
``kimi_dflash.core``: the instruments that check the benchmark (the synthetic server, the capacity study, the
cross-check against ``vllm bench serve``) live in ``kimi_dflash_lab`` and depend on this package,
never the other way round.
"""
