import sys

from kimi_dflash.sweep.cli import main

sys.exit(main(prog="kimi26-vllm-dflash-sweep.sh"))
