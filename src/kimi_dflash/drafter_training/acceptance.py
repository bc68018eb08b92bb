"""Side-by-side acceptance of drafters measured on the same prompts: reads benchmark result files
(payload/benchmark_multi_turn.py, /metrics counter deltas) and prints acceptance per draft position.

    python -m kimi_dflash.drafter_training.acceptance random=RESULT.json trained=RESULT.json
"""

from __future__ import annotations

import sys

from kimi_dflash.bench.result import load_result


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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or any("=" not in a for a in args):
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(rows([tuple(a.split("=", 1)) for a in args])))  # type: ignore[misc]
    return 0


if __name__ == "__main__":
    sys.exit(main())
