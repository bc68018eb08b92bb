"""`kimi-dflash check-vllm DIR [CONFIG]`: will the vLLM at DIR start this config's plan? Judged from vLLM's
source without starting anything; the same check as `kimi-dflash serve CONFIG --check-vllm DIR`."""

from __future__ import annotations

import argparse


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument(
        "vllm",
        metavar="DIR",
        help="vLLM's `vllm` package directory, a directory holding it (an unpacked wheel), or a .whl",
    )
    parser.add_argument("config", nargs="?", help="config path or shipped config name (default: production)")
    parser.add_argument(
        "--no-dry-engine", action="store_true", help="skip vLLM's own start-up code (the dry engine); rules only"
    )


def main(args: argparse.Namespace) -> int:
    from kimi_dflash.launch import cli

    extra = ["--no-dry-engine"] if args.no_dry_engine else []
    return cli.main([*([args.config] if args.config else []), "--check-vllm", args.vllm, *extra])


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m kimi_dflash.launch.check_vllm")
    add_cli_args(_parser)
    raise SystemExit(main(_parser.parse_args()))
