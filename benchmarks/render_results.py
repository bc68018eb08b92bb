#!/usr/bin/env python3
"""Render README's result tables from the files in benchmarks/results/ (kimi_dflash.results_doc).

python benchmarks/render_results.py           # print the block
python benchmarks/render_results.py --write   # update README.md between the results markers
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
try:
    from kimi_dflash import results_cli
except ImportError:
    sys.path.insert(0, str(REPO / "src"))
    from kimi_dflash import results_cli

from kimi_dflash.core.options import declare, option, run


@dataclass(kw_only=True)
class RenderOptions:
    write: bool = option("update README.md instead of printing")


add_cli_args = declare(RenderOptions, __doc__)


def main(args: RenderOptions) -> int:
    readme = REPO / "README.md" if args.write else None
    return results_cli.main(results_cli.ResultsOptions(directory=REPO / "benchmarks" / "results", write=readme))


if __name__ == "__main__":
    sys.exit(run(__name__))
