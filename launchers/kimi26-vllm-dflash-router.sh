#!/usr/bin/env bash
# Route traffic over several kimi-k26-dflash replicas (one per 8-GPU node) with vllm-router; all logic lives in
# Python (kimi_dflash.scaleout.router).
#   launchers/kimi26-vllm-dflash-router.sh --replica http://node1:8262 --replica http://node2:8262 [--help]
set -euo pipefail

exec "$(dirname "${BASH_SOURCE[0]}")/lib/python-module.sh" kimi_dflash.scaleout.router "$@"
