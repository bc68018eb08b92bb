#!/usr/bin/env bash
# The whole recipe on one NVIDIA Hopper GPU, in the checkout on the GPU host (docs: lab/gpu/README.md):
#   lab/gpu/run.sh RESULTS_DIR             part 1 (<= 8 min): kit, fabricate, two starts + curl, qualify
#   lab/gpu/run.sh RESULTS_DIR --part 2    part 2 (<= 10 min): qualify to the end, FP8 KV, the hook's cost
#   lab/gpu/run.sh RESULTS_DIR --config configs/demo-cpu.env    the CPU rehearsal of every step
# All logic lives in Python (kimi_dflash_lab.gpu_run); this only picks the interpreter.
set -euo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${KIMI_PYTHON:-}"
if [[ -z "$python" && -x "$checkout/.venv/bin/python" ]]; then
  python="$checkout/.venv/bin/python"
fi
python="${python:-$(command -v python3 || true)}"
if [[ -z "$python" ]]; then
  echo "run.sh: no python3 found; point KIMI_PYTHON at the interpreter that has torch" >&2
  exit 2
fi
export PYTHONPATH="$checkout/src:$checkout/lab${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m kimi_dflash_lab gpu-run --python "$python" "$@"
