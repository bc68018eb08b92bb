#!/usr/bin/env bash
# Train a DFlash drafter matched to its target: setup -> regen -> train -> export. All logic lives in Python
# (kimi_dflash.drafter_training.cli). SpecForge runs in its own venv, which the setup phase makes; the
# interpreter found here (launchers/lib/python-module.sh) only orchestrates.
#   ./train-drafter.sh [--demo] [--dry-run] [--phase P] [--skip-setup] [--skip-regen]   (--help for more)
set -euo pipefail

exec "$(dirname "${BASH_SOURCE[0]}")/launchers/lib/python-module.sh" kimi_dflash.drafter_training.cli "$@"
