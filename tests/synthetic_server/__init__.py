"""A fast, exactly-timed fake OpenAI streaming server (stdlib asyncio only), in its own process: the benchmark's
test double (a helper of the product's tests; the lab's studies drive it too, through kimi_dflash_lab's
use_test_helpers).

It exists to check the benchmark against a known truth and to measure how many streams a client can
follow. Every stream follows a schedule fixed by the command line:

* the role chunk and the first content chunk are written ``--ttft-ms`` after the request body arrives;
* one content chunk every ``--chunk-interval-ms`` after that, carrying ``--chunk-tokens`` tokens (a
  comma-separated list cycles: ``3,1,2`` means chunks of 3, 1, 2, 3, 1, 2 ... tokens);
* ``N = max_tokens`` tokens in total (``--output-tokens`` caps it), the last content chunk carries the
  finish reason, then a usage chunk with empty ``choices``, then ``data: [DONE]``.

So a client should measure TTFT = ttft, E2EL = ttft + (C - 1) * interval for C content chunks, and
TPOT = (C - 1) * interval / (N - 1). With ``--spec-tokens K`` it also exports vLLM's speculative-decoding
counters on ``/metrics``, derived from the chunks it wrote: every content chunk after the first is one
verify step with K draft tokens and ``size - 1`` accepted tokens (positions 0 .. size - 2).

``--faults`` injects misbehaviour, one entry per request in arrival order, cycling. The HTTP layer is a
hand-written HTTP/1.1 protocol (keep-alive, chunked responses) rather than a web framework so that one
core can feed thousands of streams on schedule; ``GET /stats`` reports how late the writes were.

Modules, one job each: ``schedule`` (timing and chunk plan), ``events`` (SSE event bytes), ``faults``
(the misbehaviours), ``stats`` (counters and the per-request truth log), ``prometheus_text`` (/metrics),
``http`` (HTTP/1.1 protocol), ``stream`` (driving one completion), ``server`` (routing, shared ticker),
``process`` (start it in its own process), ``cli``.

Usage (tests/ on PYTHONPATH: ``environ()``): python -m synthetic_server --port 0 --ttft-ms 100 --chunk-interval-ms 20
"""

from synthetic_server.process import environ, running
from synthetic_server.schedule import Schedule, plan_chunks

__all__ = ["Schedule", "environ", "plan_chunks", "running"]
