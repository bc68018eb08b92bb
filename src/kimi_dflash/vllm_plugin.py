"""vLLM general plugin (``vllm.general_plugins``): vLLM calls ``register()`` in every process before the model is
built. It logs and swallows exceptions raised while *importing* a plugin, so this module imports nothing heavy and
everything that must not fail silently happens inside ``register()``."""

from __future__ import annotations


def register() -> None:
    from kimi_dflash.kvscale.runtime import install_kv_scale_hook
    from kimi_dflash.patcher import floor

    package = floor.package_dir()
    if package is not None and floor.package_at_floor(package):  # newer vLLM: the patcher is never loaded
        floor.log_at_floor(package)
    else:
        from kimi_dflash.patcher.runtime import apply_runtime_patches

        apply_runtime_patches()  # DFlash + MLA fixes the installed vLLM still lacks (see docs/patches.md)
    install_kv_scale_hook()  # FP8 KV scales for MLA when KIMI_DFLASH_KV_SCALE_MODE asks for them
