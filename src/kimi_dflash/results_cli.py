"""`kimi-dflash results`: render the result tables (README's Results section) from a directory of result
files; ``--write README`` updates that file between its results markers."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.doc_sections import MissingMarkers, update_sections
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.options import declare, option, run


@dataclass(kw_only=True)
class ResultsOptions:
    directory: Path = option("result files (benchmarks/results)", positional=True, default=Path("benchmarks/results"))
    write: Path | None = option("update this file instead of printing", metavar="README")


add_cli_args = declare(ResultsOptions, __doc__)


def main(args: ResultsOptions) -> int:
    from kimi_dflash import results_doc

    try:
        if not args.directory.is_dir():
            raise UserError(f"{args.directory} is not a directory of result files; pass the right one")
        block = results_doc.render_block(args.directory)
        if args.write is None:
            sys.stdout.write(block)
            return 0
        update_sections(args.write, [(block, results_doc.BEGIN, results_doc.END)])
    except (UserError, MissingMarkers) as error:
        print(f"results: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"results: cannot write {args.write}: {error.strerror or error}; nothing was changed", file=sys.stderr)
        return 2
    print(f"updated {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash.results_cli"))
