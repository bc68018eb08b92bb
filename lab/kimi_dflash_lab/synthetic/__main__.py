"""python -m kimi_dflash_lab.synthetic: run the synthetic server (see cli.py, --help)."""

import sys

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("kimi_dflash_lab.synthetic.cli", prog="python -m kimi_dflash_lab.synthetic"))
