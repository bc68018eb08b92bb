"""vLLM general plugin (entry point group ``vllm.general_plugins``).

vLLM calls ``register()`` in every process it starts (API server, engine core, workers) before the model
is built. vLLM logs and swallows exceptions raised while *importing* a plugin, so this module imports nothing
heavy at load time, and everything that must not fail silently happens inside ``register()`` and raises there.
"""

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
