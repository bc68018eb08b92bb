#!/usr/bin/env bash
# Run one of the project's Python modules from this checkout, with the interpreter every launcher uses:
# $KIMI_PYTHON, else the venv launchers/setup-cpu.sh made (.venv), else python3 on PATH. The checkout's src/
# goes first on PYTHONPATH, so a plain checkout runs without `pip install` (vLLM's plugin still needs one:
# preflight says so).
#   launchers/lib/python-module.sh MODULE [ARGS...]
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [[ $# -lt 1 ]]; then
  echo "usage: $0 MODULE [ARGS...]" >&2
  exit 2
fi
module="$1"
shift

if [[ -n "${KIMI_PYTHON:-}" ]]; then
  python="$KIMI_PYTHON"
elif [[ -x "$repo_dir/.venv/bin/python" ]]; then
  python="$repo_dir/.venv/bin/python"
else
  python="$(command -v python3 || true)"
fi
if [[ -z "$python" ]]; then
  echo "${module}: no python3 found; run launchers/setup-cpu.sh (CPU demo) or install Python 3.10+," \
       "or point KIMI_PYTHON at an interpreter" >&2
  exit 1
fi

export PYTHONPATH="$repo_dir/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m "$module" "$@"
