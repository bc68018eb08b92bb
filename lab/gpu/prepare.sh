#!/usr/bin/env bash
# Build, where the package index is reachable, the offline vLLM 0.26.0 bundle the GPU host installs
# (lab/gpu/README.md) into .gpu-kit/bundle/ of this checkout (ignored through .git/info/exclude); carry that
# folder to the GPU host with the checkout.
#   lab/gpu/prepare.sh [--no-prune] [--kit DIR] [--force]
set -euo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONPATH="$checkout/lab${PYTHONPATH:+:$PYTHONPATH}"
exec "$checkout/launchers/lib/python-module.sh" kimi_dflash_lab gpu-prepare "$@"
