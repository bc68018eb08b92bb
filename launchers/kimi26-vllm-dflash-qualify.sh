#!/usr/bin/env bash
# Qualify a box in one command (kimi_dflash.qualify does the work; --help for more):
#   launchers/kimi26-vllm-dflash-qualify.sh CONFIG [--budget DURATION] [--out DIR] [--dry-run] [--resume]
set -euo pipefail


exec "$(dirname "${BASH_SOURCE[0]}")/lib/python-module.sh" kimi_dflash.qualify "$@"
