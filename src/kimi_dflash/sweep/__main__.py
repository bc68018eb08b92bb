import sys

from kimi_dflash.core import options

sys.exit(options.run("kimi_dflash.sweep.cli", prog="kimi26-vllm-dflash-sweep.sh"))
