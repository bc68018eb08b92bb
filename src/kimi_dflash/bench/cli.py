"""The multi-turn benchmark's command line (options: bench/settings.py; payload/benchmark_multi_turn.py wraps this)."""

from __future__ import annotations

import sys

from kimi_dflash.bench.settings import Settings
from kimi_dflash.core import options

DESCRIPTION = """\
Multi-turn streaming benchmark for an OpenAI-compatible server (vLLM), built to measure speculative
decoding honestly. N concurrent sessions each hold a T-turn conversation (assistant replies are carried
into the next turn, so prompts grow); every level of --sessions is measured separately.

Metrics (docs/benchmark.md): TTFT = first token-bearing chunk - send; E2EL = last token-bearing chunk -
send; N = usage.completion_tokens; TPOT = (E2EL - TTFT) / (N - 1); per-user tok/s = 1/TPOT (and N/E2EL,
labelled); output tok/s = sum of N / wall time of the measured window. Speculative-decoding acceptance comes
from /metrics counter deltas taken after warmup.
"""

EPILOG = """\
examples:
  %(prog)s                      # the server ./serve.sh started on this machine, its only model
  %(prog)s --sessions 8,16,32 --turns-per-session 5 --max-tokens 512 --label dflash \\
      --output results/dflash.json
  %(prog)s --base-url http://gpu-box:8262 --model kimi-k2.6 --sessions 32 --repeats 3 \\
      --dataset my_prompts.jsonl

exit status: 0 finished (failed requests are counted in the result, not fatal); 2 bad arguments, server
unreachable at start, model not served (or several served and no --model); 3 the server went away
mid-run (partial results written); 4 the result could not be written mid-run (disk full: the file keeps the
last level written); 5 this machine ran out of file descriptors, local ports or memory mid-run (not the
server's fault; partial results written); 130/143 interrupted by Ctrl-C/SIGTERM (partial results written).
"""


add_cli_args = options.declare(Settings, DESCRIPTION, EPILOG)


def main(settings: Settings) -> int:
    from kimi_dflash.bench import run  # aiohttp and pydantic: --help and a refused command line start without them

    return run.run(settings)


if __name__ == "__main__":
    sys.exit(options.run(__name__, prog="python -m kimi_dflash.bench.cli"))
