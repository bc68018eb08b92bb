"""`kimi-dflash results`: render the result tables (README's Results section) from a directory of result
files; ``--write README`` updates that file between its results markers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.errors import UserError


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "directory",
        nargs="?",
        type=Path,
        default=Path("benchmarks/results"),
        help="directory of result files (default: ./benchmarks/results)",
    )
    parser.add_argument("--write", type=Path, metavar="README", help="update this file instead of printing")


def main(args: argparse.Namespace) -> int:
    from kimi_dflash import results_doc

    try:
        if not args.directory.is_dir():
            raise UserError(f"{args.directory} is not a directory of result files; pass the right one")
        block = results_doc.render_block(args.directory)
        if args.write is None:
            sys.stdout.write(block)
            return 0
        if not args.write.is_file():
            raise UserError(f"{args.write} not found: run from the repository root or pass --write PATH")
        write_text_atomic(args.write, results_doc.splice(args.write.read_text(encoding="utf-8"), block))
    except UserError as error:
        print(f"results: {error}", file=sys.stderr)
        return 2
    print(f"updated {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m kimi_dflash.results_cli")
    add_cli_args(_parser)
    raise SystemExit(main(_parser.parse_args()))
