#!/usr/bin/env bash
# Compare an FP8-KV server with a BF16-KV server of the same model and print a verdict.
# Usage: benchmarks/validate-fp8.sh --bf16-url URL --fp8-url URL [--bf16-log F --fp8-log F] [--help]
# The work is done by kimi_dflash.fp8.validate; this script only picks the Python to run it with.
set -euo pipefail

exec "$(dirname "${BASH_SOURCE[0]}")/../launchers/lib/python-module.sh" kimi_dflash.fp8.validate "$@"
