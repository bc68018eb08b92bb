"""Runs inside each vLLM worker of the pre-sharder: save this rank's weights as loaded, in sharded_state format.

Saved just before the loader's process_weights_after_loading (wrapped on import when KIMI_DFLASH_PRESHARD_OUTPUT is
set), not by vLLM's save_sharded_state, which saves kernel layout and fails three ways on MLA (docs/lifecycle.md
"Why not vLLM's own save_sharded_state"). Files are written by vLLM's ShardedStateLoader.save_model, so its loader
reads them."""

from __future__ import annotations

import os
from typing import Any

OUTPUT_ENV = "KIMI_DFLASH_PRESHARD_OUTPUT"
MAX_SIZE_ENV = "KIMI_DFLASH_PRESHARD_MAX_SIZE"
_saved: list[str] = []


def _install_hook() -> None:
    from vllm.model_executor.model_loader import base_loader
    from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader

    process = base_loader.process_weights_after_loading

    def save_then_process(model: Any, model_config: Any, target_device: Any) -> Any:  # vLLM's signature
        if not _saved:  # the first model this worker loads is the target (the pre-sharder runs no drafter)
            output = os.environ[OUTPUT_ENV]
            before = set(os.listdir(output))
            max_size = int(os.environ.get(MAX_SIZE_ENV, "0")) or None
            ShardedStateLoader.save_model(model, output, max_size=max_size)
            _saved.extend(sorted(set(os.listdir(output)) - before))
        return process(model, model_config, target_device)

    base_loader.process_weights_after_loading = save_then_process


if os.environ.get(OUTPUT_ENV):
    _install_hook()


class PreshardWorkerExtension:
    def kimi_dflash_preshard_files(self) -> list[str]:
        """The shard files this worker wrote (empty: the hook did not run)."""
        return list(_saved)
