#!/usr/bin/env bash
# Launch vLLM for Kimi K2.6 + DFlash from an env-file config. All logic lives in Python
# (kimi_dflash.launch.cli); this wrapper only finds the interpreter. The config is parsed, never sourced.
#   ./serve.sh [CONFIG] [--dry-run] [--preflight] [--wait] [--stop] [--log FILE]   (--help for more)
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Interpreter: $KIMI_PYTHON, else the project venv made by launchers/setup-cpu.sh, else python3 on PATH.
if [[ -n "${KIMI_PYTHON:-}" ]]; then
  python="$KIMI_PYTHON"
elif [[ -x "$repo_dir/.venv/bin/python" ]]; then
  python="$repo_dir/.venv/bin/python"
else
  python="$(command -v python3 || true)"
fi
if [[ -z "$python" ]]; then
  echo "serve.sh: no python3 found; run launchers/setup-cpu.sh (CPU demo) or install Python 3.10+" >&2
  exit 1
fi

# The source tree is importable from a plain checkout, but vLLM loads the project's plugin (FP8 KV scales,
# runtime patches) only when the package is installed (entry-point metadata): preflight refuses a plan that
# needs it and prints the install command (launchers/install-into-image.sh in a GPU image).
export PYTHONPATH="$repo_dir/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m kimi_dflash.launch.cli "$@"
