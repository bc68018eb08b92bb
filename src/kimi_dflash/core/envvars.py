"""Environment variables one part of the project writes and another reads: one name and one default each, so the
plan (writer), the plugin in every vLLM process and the config schema cannot disagree. A leaf: imports nothing."""

from __future__ import annotations

# ---- the project's own ----
CACHE = "KIMI_DFLASH_CACHE"  # overrides the cache directory (paths.cache_root)
PATCHES = "KIMI_DFLASH_PATCHES"  # "off": the plugin applies no runtime patch

# Read by the plugin's KV-scale hook (kvscale/settings.py); config key in the comment.
KV_SCALE_MODE = "KIMI_DFLASH_KV_SCALE_MODE"  # KV_SCALE_MODE
KV_SCALES_FILE = "KIMI_DFLASH_KV_SCALES_FILE"  # KV_SCALES_FILE
KV_SCALE_FLOOR = "KIMI_DFLASH_KV_SCALE_FLOOR"  # KV_SCALE_FLOOR
KV_SCALE_WARMUP_STEPS = "KIMI_DFLASH_KV_SCALE_WARMUP_STEPS"  # KV_SCALE_WARMUP_STEPS
KV_OBSERVE_DIR = "KIMI_DFLASH_KV_OBSERVE_DIR"  # KV_OBSERVE_DIR
KV_OBSERVE_INTERVAL = "KIMI_DFLASH_KV_OBSERVE_INTERVAL"  # KV_OBSERVE_INTERVAL
KV_EMULATE_FP8 = "KIMI_DFLASH_KV_EMULATE_FP8"  # no config key: a CPU test aid (FP8 storage emulated in BF16)

# Read by the compatibility rules (rules/catalog/prefix_caching.py) from the plan's environment; config key after.
ALLOW_DFLASH_PREFIX_CACHING = "KIMI_DFLASH_ALLOW_DFLASH_PREFIX_CACHING"  # ALLOW_DFLASH_PREFIX_CACHING

KV_SCALE_MODE_OFF = "off"
# Far below any scale a real MLA checkpoint needs (Kimi K2.6 converges to 0.026-0.068), but keeps a first write
# of zeros (vLLM's dummy warm-up batches) from producing a zero scale.
DEFAULT_KV_SCALE_FLOOR = 1e-4
DEFAULT_KV_SCALE_WARMUP_STEPS = 0  # 0: a dynamic scale never freezes
DEFAULT_KV_OBSERVE_INTERVAL_S = 2.0

# ---- vLLM's, written by the plan ----
VLLM_API_KEY = "VLLM_API_KEY"
VLLM_CACHE_ROOT = "VLLM_CACHE_ROOT"
VLLM_CPU_KVCACHE_SPACE = "VLLM_CPU_KVCACHE_SPACE"
VLLM_CPU_OMP_THREADS_BIND = "VLLM_CPU_OMP_THREADS_BIND"
VLLM_ENABLE_V1_MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"
VLLM_ROCM_USE_AITER = "VLLM_ROCM_USE_AITER"
VLLM_ROCM_USE_AITER_MLA = "VLLM_ROCM_USE_AITER_MLA"
VLLM_ROCM_QUICK_REDUCE_QUANTIZATION = "VLLM_ROCM_QUICK_REDUCE_QUANTIZATION"
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"
# vLLM 0.26 imports flashinfer unguarded when it builds its sampler unless this is 0 (the plan sets it on CUDA when
# the serving Python has no flashinfer).
VLLM_USE_FLASHINFER_SAMPLER = "VLLM_USE_FLASHINFER_SAMPLER"
# The NVIDIA driver's JIT cache: vLLM 0.26's Marlin MoE kernels ship PTX only for Hopper, compiled at first use.
CUDA_CACHE_PATH = "CUDA_CACHE_PATH"
CUDA_CACHE_MAXSIZE = "CUDA_CACHE_MAXSIZE"
LD_PRELOAD = "LD_PRELOAD"
