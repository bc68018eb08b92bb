"""FP8 KV-cache scales for MLA models (Kimi K2.6): runtime hook, calibration, validation.

The instruments that measure it (the tiny MLA model fabricator, the hook-cost benchmark) are in
kimi_dflash_lab.

Import-light on purpose (the vLLM plugin imports it in every vLLM process). Modules:
  settings     KIMI_DFLASH_KV_* environment -> KvScaleSettings
  fp8          FP8 formats (E4M3FN 448, E4M3FNUZ 240) and which one a kv_cache_dtype means
  scale_math   device-side amax / scale arithmetic (no host sync)
  write_hook   the do_kv_cache_update wrapper
  runtime      install_kv_scale_hook(): hooks vLLM's MLAAttention (called from vllm_plugin.register)
  observer     per-rank observe dumps
  scales_file  the observe-dump and scales-file JSON, and their checks
  calibrate    kimi-dflash calibrate-kv
  validate     benchmarks/validate-fp8.sh
  checks       pre-launch checks for preflight
"""
