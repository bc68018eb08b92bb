import sys

from kimi_dflash.core import options

sys.exit(options.run("kimi_dflash.preflight.cli", prog="python -m kimi_dflash.preflight"))
