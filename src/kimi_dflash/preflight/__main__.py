import sys

from kimi_dflash.core import options

sys.exit(options.run("kimi_dflash.preflight.cli", prog="kimi-dflash preflight"))
