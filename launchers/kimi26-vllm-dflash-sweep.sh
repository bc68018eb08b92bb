#!/usr/bin/env bash
# Sweep server configurations x benchmark concurrency (kimi_dflash.sweep does the work; --help for more):
#   launchers/kimi26-vllm-dflash-sweep.sh CONFIG --grid KEY=v1,v2 [--grid ...] --sessions 2,4 --out DIR \
#       [--dry-run] [benchmark options]
set -euo pipefail


exec "$(dirname "${BASH_SOURCE[0]}")/lib/python-module.sh" kimi_dflash.sweep "$@"
