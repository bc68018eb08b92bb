#!/usr/bin/env bash
# Install this project into a GPU image whose vLLM and torch are already installed (ROCm or CUDA builds),
# without changing any package the image ships: every installed distribution is pinned to its current version
# for this one pip run, so pip may add what the project needs (python-dotenv, aiohttp, huggingface_hub) but can
# never upgrade or replace vLLM or torch. The install registers the vLLM plugin (entry point kimi_dflash), which
# FP8 KV scales and the pre-0.21 runtime patches need.
#   launchers/install-into-image.sh          (python: $KIMI_PYTHON, else python3 on PATH)
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${KIMI_PYTHON:-python3}"
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT

PYTHONPATH="$repo_dir/src" "$python" -m kimi_dflash.launch.image_pins > "$pins"
echo "install: pinned $(wc -l < "$pins") installed distributions for this install"
if ! "$python" -m pip install --quiet --progress-bar off --constraint "$pins" -e "${repo_dir}[gpu]"; then
  echo "install: pip refused (nothing of the image was changed): a requirement of this project conflicts with" \
       "a package version the image ships; see pip's message above" >&2
  exit 1
fi
PYTHONPATH="$repo_dir/src" "$python" -m kimi_dflash.launch.image_pins --verify "$pins"
