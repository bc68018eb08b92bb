#!/usr/bin/env bash
# Launch vLLM for Kimi K2.6 + DFlash from an env-file config. All logic lives in Python
# (kimi_dflash.launch.cli); the config is parsed, never sourced. The interpreter: launchers/lib/python-module.sh.
#   ./serve.sh [CONFIG] [--dry-run] [--preflight] [--wait] [--stop] [--log FILE]   (--help for more)
set -euo pipefail

exec "$(dirname "${BASH_SOURCE[0]}")/launchers/lib/python-module.sh" kimi_dflash.launch.cli "$@"
