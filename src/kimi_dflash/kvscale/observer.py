"""Dump a vLLM process's per-layer statistics every ``interval`` seconds and at exit, from a background thread
(reading device counters synchronises: never in the forward pass)."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_dflash.core.atomic_write import write_json_atomic
from kimi_dflash.kvscale.scales_file import ModelIdentity, observe_document
from kimi_dflash.kvscale.write_hook import LayerHook

logger = logging.getLogger("vllm.plugins.kimi_dflash.kvscale")


def current_rank() -> int:
    """Global rank of this process in vLLM's torch.distributed group (0 before it exists)."""
    try:
        import torch.distributed as dist

        return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else 0
    except Exception:  # noqa: BLE001 - no process group yet: a single process is rank 0
        return 0


def snapshot(hooks: Mapping[str, LayerHook]) -> dict[str, dict[str, Any]]:
    """Host copies of every layer's counters (synchronises with the device - background thread only)."""
    layers: dict[str, dict[str, Any]] = {}
    for name, hook in list(hooks.items()):
        entry: dict[str, Any] = {
            "amax": float(hook.stats.amax),
            "tokens": int(hook.stats.tokens),
            "writes": int(hook.stats.writes),
            "kv_cache_dtype": hook.kv_cache_dtype,
        }
        if hook.observing:
            entry["q_amax"] = float(hook.query.amax)
            entry["q_calls"] = int(hook.query.calls)
        if hook.k_scale is not None:
            entry["k_scale"] = float(hook.k_scale.reshape(-1)[0])
        layers[name] = entry
    return layers


@dataclass
class ObserveDumper:
    """Background thread that rewrites this process's observe file on a cadence."""

    directory: Path
    interval: float
    hooks: Mapping[str, LayerHook]
    identity: ModelIdentity
    vllm_version: str
    seq: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def dump(self) -> Path | None:
        if not self.hooks:
            return None
        with self._lock:
            self.seq += 1
            rank, pid = current_rank(), os.getpid()
            layers = snapshot(self.hooks)
            document = observe_document(self.identity, rank, pid, self.vllm_version, self.seq, time.time(), layers)
            path = self.directory / f"kv-observe-rank{rank}-pid{pid}.json"
            write_json_atomic(path, document)
            return path

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.dump()
            except Exception:  # a full disk must not take the server down; say so and keep trying
                logger.exception("kimi-dflash kv scales: could not write observe file to %s", self.directory)

    def start(self) -> None:
        if self._thread is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="kimi-dflash-kv-observe", daemon=True)
        self._thread.start()
        atexit.register(self._final_dump)
        logger.info("kimi-dflash kv scales: dumping per-layer amax every %.1fs to %s", self.interval, self.directory)

    def _final_dump(self) -> None:
        self._stop.set()
        try:
            self.dump()
        except Exception:
            logger.debug("kimi-dflash kv scales: final observe dump failed", exc_info=True)
