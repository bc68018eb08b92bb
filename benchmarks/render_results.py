#!/usr/bin/env python3
"""Render README's result tables from the files in benchmarks/results/ (kimi_dflash.results_doc).

python benchmarks/render_results.py           # print the block
python benchmarks/render_results.py --write   # update README.md between the results markers
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
try:
    from kimi_dflash import results_doc
except ImportError:
    sys.path.insert(0, str(REPO / "src"))
    from kimi_dflash import results_doc

from kimi_dflash.bench.report import write_text_atomic

RESULTS_DIR = REPO / "benchmarks" / "results"
README = REPO / "README.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="update README.md instead of printing")
    args = parser.parse_args(argv)
    block = results_doc.render_block(RESULTS_DIR)
    if args.write:
        write_text_atomic(README, results_doc.splice(README.read_text(encoding="utf-8"), block))
        print(f"updated {README}")
    else:
        print(block, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
