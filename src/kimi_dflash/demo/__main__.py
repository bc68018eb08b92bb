"""python -m kimi_dflash.demo: fabricate (or verify) the demo models and print their paths."""

import sys

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash.demo.cli", prog="fabricate_demo_models"))
