"""The benchmark (payload/benchmark_multi_turn.py) and its reports. Runs with aiohttp + numpy + stdlib only.

Layers: workload (prompt set, seeded session plans) -> http1 / client (one keep-alive connection per
session, raw timestamps) -> records -> response / sse (stream interpretation) -> metrics, prometheus
(pure functions) -> report (JSON schema, tables) -> cli. compare / plots turn result files into a
matched-concurrency report (matplotlib only there). synthetic_server, crosscheck and capacity check the
instrument itself. Importing this package imports nothing heavy.
"""
