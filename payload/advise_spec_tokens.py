#!/usr/bin/env python3
"""Speculative-token advisor (kimi-k26-dflash; the logic is in kimi_dflash.advisor).

  python payload/advise_spec_tokens.py DIR_OR_JSON... [--fit-k 1,4]

Prints predicted aggregate and per-user tok/s for every k at every measured concurrency, predicted vs
measured where both exist, and the recommended k per concurrency. Run with --help.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import kimi_dflash.advisor.cli  # noqa: F401 - installed, or the repository's src/ below
except ImportError:
    _src = Path(__file__).resolve().parent.parent / "src"
    if not (_src / "kimi_dflash" / "advisor").is_dir():
        sys.exit(
            f"error: kimi_dflash is not installed and {_src} is missing; copy the whole repository or pip install it"
        )
    sys.path.insert(0, str(_src))

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash.advisor.cli", prog="advise_spec_tokens.py"))
