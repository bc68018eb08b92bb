"""Feature-probed, self-retiring vLLM patches for DFlash next to an MLA target on ROCm.

Import-light on purpose (vLLM's plugin loader imports this package in every process). Public API:
  kimi_dflash.patcher.engine: status_table(), apply_pending(), revert_applied(), diff()
  kimi_dflash.patcher.cli: add_cli_args + main(args) (`kimi-dflash patch`)
  kimi_dflash.patcher.runtime.apply_runtime_patches() (the vLLM plugin)
See docs/patches.md.
"""
