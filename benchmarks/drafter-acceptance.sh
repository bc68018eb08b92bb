#!/usr/bin/env bash
# Acceptance of the demo drafters train-drafter.sh exported, measured the same way for each on the same prompts:
# the untrained (random-init) drafter, the trained one, and the fabricated demo drafter for reference. Each is
# served by serve.sh in turn (one at a time: 2 cores), benchmarked with payload/benchmark_multi_turn.py, stopped.
#   ./train-drafter.sh --demo   (first)   then   benchmarks/drafter-acceptance.sh [WORK_DIR] [PORT]
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run_module="$repo_dir/launchers/lib/python-module.sh"
cache="$("$run_module" kimi_dflash.core.paths)"
work="${1:-$cache/drafter-training/demo}"
port="${2:-18741}"
out="$work/acceptance"
mkdir -p "$out"

measure() {  # label config
  local label="$1" config="$2"
  PORT="$port" "$repo_dir/serve.sh" "$config" --wait
  "$run_module" kimi_dflash.bench --base-url "http://127.0.0.1:$port" \
    --model kimi-k26-dflash-demo --sessions 4 --turns-per-session 2 --max-tokens 128 --ignore-eos --warmup 2 \
    --seed 1 --label "$label" --output "$out/$label.json" || { PORT="$port" "$repo_dir/serve.sh" "$config" --stop; exit 1; }
  PORT="$port" "$repo_dir/serve.sh" "$config" --stop
}

measure random "$work/export/random.env"
measure trained "$work/export/serve.env"
measure fabricated "$repo_dir/configs/demo-cpu.env"
PYTHONPATH="$repo_dir/lab" "$run_module" kimi_dflash_lab drafter-acceptance "random=$out/random.json" "trained=$out/trained.json" \
  "fabricated=$out/fabricated.json"
