#!/usr/bin/env bash
# Train a DFlash drafter matched to its target: setup -> regen -> train -> export. All logic lives in Python
# (kimi_dflash.drafter_training.pipeline); this wrapper only finds the interpreter.
#   ./train-drafter.sh [--demo] [--dry-run] [--phase P] [--skip-setup] [--skip-regen]   (--help for more)
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Interpreter: $KIMI_PYTHON, else the project venv made by launchers/setup-cpu.sh, else python3 on PATH.
# (SpecForge runs in its own venv, which the setup phase makes; this one only orchestrates.)
if [[ -n "${KIMI_PYTHON:-}" ]]; then
  python="$KIMI_PYTHON"
elif [[ -x "$repo_dir/.venv/bin/python" ]]; then
  python="$repo_dir/.venv/bin/python"
else
  python="$(command -v python3 || true)"
fi
if [[ -z "$python" ]]; then
  echo "train-drafter.sh: no python3 found; run launchers/setup-cpu.sh or install Python 3.10+" >&2
  exit 1
fi

export PYTHONPATH="$repo_dir/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m kimi_dflash.drafter_training.pipeline "$@"
