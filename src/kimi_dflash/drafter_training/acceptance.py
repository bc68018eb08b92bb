"""Side-by-side acceptance of drafters measured on the same prompts: reads benchmark result files
(payload/benchmark_multi_turn.py, /metrics counter deltas) and prints acceptance per draft position.

    python -m kimi_dflash.drafter_training.acceptance random=RESULT.json trained=RESULT.json
"""

from __future__ import annotations

import sys

from kimi_dflash.bench.columns import ACCEPTANCE_LENGTH, ACCEPTANCE_RATE
from kimi_dflash.bench.result import load_result
from kimi_dflash.core.formatting import markdown_table


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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or any("=" not in a for a in args):
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(rows([tuple(a.split("=", 1)) for a in args])))  # type: ignore[misc]
    return 0


if __name__ == "__main__":
    sys.exit(main())
