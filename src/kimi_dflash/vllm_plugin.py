"""vLLM general plugin (entry point group ``vllm.general_plugins``).

vLLM calls ``register()`` in every process it starts (API server, engine core, workers) before the model
is built. vLLM logs and swallows exceptions raised while *importing* a plugin, so everything that must
not fail silently happens inside ``register()`` and raises from there.
"""

from __future__ import annotations

import importlib
import logging

logger = logging.getLogger("kimi_dflash.plugin")

_HOOKS = (
    ("kimi_dflash.patcher.runtime", "apply_runtime_patches"),
    ("kimi_dflash.kvscale.runtime", "install_kv_scale_hook"),
)


def register() -> None:
    for module_name, function_name in _HOOKS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            # TEMPORARY while the hook modules are being written; removed before the issue closes.
            logger.warning("kimi_dflash plugin: %s not present yet, skipped", module_name)
            continue
        getattr(module, function_name)()
