"""Feature-probed, self-retiring vLLM patches for DFlash next to an MLA target on ROCm (docs/patches.md). Import-light:
vLLM's plugin loader imports this package in every process. Entry points: engine (status_table, apply_pending,
revert_applied, diff), cli (`kimi-dflash patch`), runtime.apply_runtime_patches (the vLLM plugin)."""
