"""Pins that keep `pip install` from changing what a GPU image ships: a ROCm dev vLLM (0.20.1.dev5+g...rocm700) fails
`vllm>=0.20.0`, so pip would "upgrade" it to PyPI's CUDA wheels. No options: name==version of every installed
distribution; --verify PINS: exit 1 if a pinned version moved. Standard library only (runs with PYTHONPATH=src)."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.options import declare, option, run
from kimi_dflash.core.user_files import UnreadableFile, read_user_text

# This project itself is what the install adds or replaces.
SELF = "kimi-k26-dflash"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """canonical name -> version of every distribution this interpreter sees (first on sys.path wins)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name and dist.version and canonical(name) not in found:
            found[canonical(name)] = dist.version
    return found


def pins(versions: dict[str, str]) -> list[str]:
    return [f"{name}=={version}" for name, version in sorted(versions.items()) if name != SELF]


def read_pins(path: Path) -> dict[str, str]:
    lines = (line.strip().partition("==") for line in read_user_text(path, what="pins file").splitlines())
    return {canonical(name): version for name, sep, version in lines if sep}


def changed(pinned: dict[str, str], now: dict[str, str]) -> list[str]:
    return [
        f"{name}: {version} -> {now.get(name, 'removed')}"
        for name, version in sorted(pinned.items())
        if now.get(name) != version
    ]


@dataclass(kw_only=True)
class PinsOptions:
    verify: Path | None = option("check the installed versions against PINS", metavar="PINS")


add_cli_args = declare(PinsOptions, __doc__)


def main(args: PinsOptions) -> int:
    if args.verify is None:
        print("\n".join(pins(installed())))
        return 0
    try:
        pinned = read_pins(args.verify)
    except UnreadableFile as error:
        print(f"image_pins: {error}", file=sys.stderr)
        return 2
    if moved := changed(pinned, installed()):
        print("image_pins: the install changed packages the image shipped:\n  " + "\n  ".join(moved), file=sys.stderr)
        return 1
    print(f"image_pins: all {len(pinned)} pinned distributions unchanged (vLLM and torch included)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash.launch.image_pins"))
