"""Where the project keeps things on disk: one cache root, overridable by KIMI_DFLASH_CACHE."""

from __future__ import annotations

import os
from pathlib import Path

# src/kimi_dflash/paths.py -> repository root (three levels up) when run from a checkout.
REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIGS_DIR = REPO_ROOT / "configs"


def cache_root() -> Path:
    """The project's cache directory (demo models, downloaded vLLM wheels, vLLM's own cache)."""
    override = os.environ.get("KIMI_DFLASH_CACHE")
    if override:
        return Path(override).expanduser().resolve()
    return REPO_ROOT / ".cache"
