#!/usr/bin/env bash
# In-container entry point (Dockerfile.kimi26-dflash): serve the config named by $KIMI_CONFIG
# (default: production.env) with the image's Python, passing any extra arguments to serve.sh.
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
config="${KIMI_CONFIG:-$repo_dir/configs/production.env}"
export KIMI_PYTHON="${KIMI_PYTHON:-$(command -v python3)}"
exec "$repo_dir/serve.sh" "$config" "$@"
