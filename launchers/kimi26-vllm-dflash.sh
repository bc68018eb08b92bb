#!/usr/bin/env bash
# In-container entry point (Dockerfile.kimi26-dflash): serve a config with the image's Python, in the foreground.
#   kimi26-vllm-dflash.sh [CONFIG] [serve.sh options...]
# CONFIG: a config file (e.g. one mounted at /configs/my.env); default $KIMI_CONFIG, else configs/production.env.
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
config="${KIMI_CONFIG:-$repo_dir/configs/production.env}"
if [[ $# -gt 0 && "$1" != -* ]]; then
  config="$1"
  shift
fi
export KIMI_PYTHON="${KIMI_PYTHON:-$(command -v python3)}"
exec "$repo_dir/serve.sh" "$config" "$@"
