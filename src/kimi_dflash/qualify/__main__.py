import sys

from kimi_dflash.qualify.cli import run

sys.exit(run())
