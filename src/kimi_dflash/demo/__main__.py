"""python -m kimi_dflash.demo: fabricate (or verify) the demo models and print their paths."""

import sys

from kimi_dflash.demo.cli import main

if __name__ == "__main__":
    sys.exit(main())
