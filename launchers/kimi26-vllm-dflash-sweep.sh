#!/usr/bin/env bash
# Sweep server configurations x benchmark concurrency (kimi_dflash.sweep does the work; --help for more):
#   launchers/kimi26-vllm-dflash-sweep.sh CONFIG --grid KEY=v1,v2 [--grid ...] --sessions 2,4 --out DIR \
#       [--dry-run] [benchmark options]
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${KIMI_PYTHON:-}" ]]; then
  python="$KIMI_PYTHON"
elif [[ -x "$repo_dir/.venv/bin/python" ]]; then
  python="$repo_dir/.venv/bin/python"
else
  python="$(command -v python3 || true)"
fi
if [[ -z "$python" ]]; then
  echo "sweep: no python3 found; run launchers/setup-cpu.sh (CPU demo) or install Python 3.10+" >&2
  exit 1
fi
export PYTHONPATH="$repo_dir/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m kimi_dflash.sweep --serve-sh "$repo_dir/serve.sh" "$@"
