import sys

from kimi_dflash.core import options

sys.exit(options.run("kimi_dflash.qualify.cli", prog="kimi26-vllm-dflash-qualify.sh"))
