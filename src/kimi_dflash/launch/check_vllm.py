"""`kimi-dflash check-vllm DIR [CONFIG]`: will the vLLM at DIR start this plan? (serve --check-vllm, from source)"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.options import declare, option, run


@dataclass(kw_only=True)
class CheckVllmOptions:
    vllm: Path = option(
        "vLLM's `vllm` package directory, a directory holding it (an unpacked wheel), or a .whl",
        positional=True,
        required=True,
        metavar="DIR",
    )
    config: str | None = option("config path or shipped config name (default: production)", positional=True)
    no_dry_engine: bool = option(hidden=True)  # the dry engine is the lab's now; still accepted for old scripts


add_cli_args = declare(CheckVllmOptions, __doc__)


def main(args: CheckVllmOptions) -> int:
    from kimi_dflash.launch import cli

    return cli.main(cli.ServeOptions(config=args.config, check_vllm=args.vllm, no_dry_engine=args.no_dry_engine))


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash.launch.check_vllm"))
