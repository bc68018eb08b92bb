"""Where the project keeps things on disk: one user cache directory, overridable by KIMI_DFLASH_CACHE (`python -m
kimi_dflash.core.paths` prints it). Never the checkout the package came from: a wheel install works the same."""

from __future__ import annotations

import os
from pathlib import Path

from kimi_dflash.core.envvars import CACHE as CACHE_ENV

CACHE_DIR_NAME = "kimi-dflash"


def cache_root() -> Path:
    """$KIMI_DFLASH_CACHE if set, else $XDG_CACHE_HOME/kimi-dflash, else ~/.cache/kimi-dflash."""
    if override := os.environ.get(CACHE_ENV):
        return Path(override).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / CACHE_DIR_NAME).resolve()


if __name__ == "__main__":  # python -m kimi_dflash.core.paths: print the cache directory (for shell scripts)
    print(cache_root())
