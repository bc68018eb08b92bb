"""Side-by-side acceptance of drafters measured on the same prompts: reads benchmark result files
(payload/benchmark_multi_turn.py, /metrics counter deltas) and prints acceptance per draft position.

    python -m kimi_dflash.drafter_training.acceptance random=RESULT.json trained=RESULT.json
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from kimi_dflash.bench.result import load_result
from kimi_dflash.core.options import declare, option, run


def rows(labelled: list[tuple[str, str]]) -> list[str]:
    lines = ["| drafter | acceptance | mean acceptance length | per position | drafts |", "|---|---|---|---|---|"]
    for label, path in labelled:
        level = load_result(path).results[0]
        spec = level.spec_decode
        if spec is None:
            raise SystemExit(f"{path}: no speculative decoding counters (was the server started with a drafter?)")
        positions = ", ".join(f"{100 * p:.1f}" for p in spec.per_position)
        lines.append(
            f"| {label} | {100 * spec.acceptance_rate:.1f} % | {spec.acceptance_length:.2f} | {positions} % | "
            f"{spec.drafts} |"
        )
    return lines


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
    sys.exit(run(__name__, prog="python -m kimi_dflash.drafter_training.acceptance"))
