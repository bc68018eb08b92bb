#!/usr/bin/env python3
"""Is the candidate server's output the reference's? (kimi-k26-dflash; the logic is in kimi_dflash.validate.)

  python payload/validate.py --reference URL --candidate URL [--model-ref NAME --model-cand NAME]

Exit 0 PASS, 1 WARN, 2 FAIL, 3 could not run. Run with --help.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import kimi_dflash.validate.cli  # noqa: F401 - installed, or the repository's src/ below
except ImportError:
    _src = Path(__file__).resolve().parent.parent / "src"
    if not (_src / "kimi_dflash" / "validate").is_dir():
        sys.exit(
            f"error: kimi_dflash is not installed and {_src} is missing; copy the whole repository or pip install it"
        )
    sys.path.insert(0, str(_src))

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash.validate.cli", prog="validate.py"))
