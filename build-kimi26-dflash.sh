#!/usr/bin/env bash
# Build Dockerfile.kimi26-dflash and tag it with the project and vLLM versions; all logic lives in Python
# (kimi_dflash.image.build).   ./build-kimi26-dflash.sh [--help]
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$repo_dir/launchers/lib/python-module.sh" kimi_dflash.image.build --context "$repo_dir" "$@"
