"""`kimi-dflash version`: this package's version and the vLLM it would run with (read from package metadata,
without importing vLLM, so it answers in milliseconds on any box)."""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass

from kimi_dflash import __version__
from kimi_dflash.core import options


@dataclass
class VersionOptions:
    """No options."""


add_cli_args = options.declare(VersionOptions, __doc__)


def main(args: VersionOptions) -> int:
    from kimi_dflash.preflight.runtime_child import installed_vllm

    distribution, version = installed_vllm()
    print(f"kimi-dflash {__version__}")
    print(f"vllm {f'{version} ({distribution})' if version else 'not installed'}")
    print(f"python {platform.python_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(options.run(__name__, prog="python -m kimi_dflash.version_cli"))
