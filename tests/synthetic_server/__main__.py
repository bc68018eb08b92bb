"""python -m synthetic_server: run the synthetic server (see cli.py, --help)."""

import sys

from kimi_dflash.core import options

if __name__ == "__main__":
    sys.exit(options.run("synthetic_server.cli", prog="python -m synthetic_server"))
