"""Side-by-side acceptance of drafters measured on the same prompts: reads benchmark result files
(payload/benchmark_multi_turn.py, /metrics counter deltas) and prints acceptance per draft position.

    python -m kimi_dflash_lab drafter-acceptance random=RESULT.json trained=RESULT.json
(benchmarks/drafter-acceptance.sh runs it on the drafters train-drafter.sh --demo exported).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from kimi_dflash.bench.columns import ACCEPTANCE_LENGTH, ACCEPTANCE_RATE
from kimi_dflash.bench.result import load_result
from kimi_dflash.core.formatting import markdown_table
from kimi_dflash.core.options import declare, option, run


def rows(labelled: list[tuple[str, str]]) -> list[str]:
    rate, tau = ACCEPTANCE_RATE, ACCEPTANCE_LENGTH
    table = []
    for label, path in labelled:
        level = load_result(path).results[0]
        spec = level.spec_decode
        if spec is None:
            raise SystemExit(f"{path}: no speculative decoding counters (was the server started with a drafter?)")
        positions = ", ".join(map(rate.fmt, spec.per_position))
        table.append([label, rate.cell(level), tau.cell(level), positions, spec.drafts])
    return markdown_table(["drafter", rate.header, tau.header, "per position", "drafts"], "lrrlr", table)


def _labelled(text: str) -> tuple[str, str]:
    label, sep, path = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r}: expected LABEL=RESULT.json")
    return label, path


@dataclass(kw_only=True)
class AcceptanceOptions:
    runs: list[tuple[str, str]] = option(
        "benchmark results to compare, each as LABEL=RESULT.json", positional=True, required=True, parse=_labelled,
        metavar="LABEL=RESULT.json",
    )  # fmt: skip


add_cli_args = declare(AcceptanceOptions, __doc__)


def main(args: AcceptanceOptions) -> int:
    print("\n".join(rows(args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab drafter-acceptance"))
