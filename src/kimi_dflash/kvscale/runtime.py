"""Install the KV-scale hook in a vLLM process (docs/fp8-kv.md, "Where it hooks"). Bad settings or scales files
raise: a server must not come up with wrong KV scales."""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from kimi_dflash.kvscale import scales_file
from kimi_dflash.kvscale.fp8 import E4M3_KV_DTYPES, fp8_format_for, platform_is_fnuz
from kimi_dflash.kvscale.settings import KvScaleSettings, Mode, settings_from_env

logger = logging.getLogger("vllm.plugins.kimi_dflash.kvscale")

MLA_MODULE = "vllm.model_executor.layers.attention.mla_attention"
MLA_CLASS = "MLAAttention"
# Regular (GQA/MHA) attention: only watched so a non-MLA model says in its log that the hook does nothing.
ATTENTION_MODULE = "vllm.model_executor.layers.attention.attention"
ATTENTION_CLASS = "Attention"
_PATCHED_MARKER = "__kimi_dflash_kv_patched__"
# KV dtypes that are not quantised at all; only these can host the FP8 emulation.
UNQUANTISED_KV_DTYPES = ("auto", "bfloat16", "float16", "float32", "half", "float")


@dataclass
class _ProcessState:
    """Everything the hook knows in this process (one per process; vLLM builds one model per worker)."""

    settings: KvScaleSettings
    hooks: dict[str, Any] = field(default_factory=dict)
    identity: scales_file.ModelIdentity | None = None
    scales: scales_file.ScalesFile | None = None
    dumper: Any = None
    applied: int = 0
    noop_logged: bool = False
    non_mla_logged: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


_state: _ProcessState | None = None


def install_kv_scale_hook() -> None:
    """Read KIMI_DFLASH_KV_* and, if anything is enabled, hook vLLM's MLA layer (idempotent)."""
    global _state
    settings = settings_from_env()
    if not settings.active:
        logger.debug("kimi-dflash kv scales: mode off, hook not installed")
        return
    if _state is not None:
        return
    state = _ProcessState(settings)
    if settings.mode is Mode.CALIBRATED:
        assert settings.scales_file is not None
        # Shape errors surface at startup, in every process.
        state.scales = scales_file.load_scales_file(settings.scales_file)
    _check_mla_module_exists()
    _state = state
    from kimi_dflash.core.import_hooks import when_imported

    when_imported(MLA_MODULE, _patch_mla_module)
    when_imported(ATTENTION_MODULE, lambda module: _patch(module, ATTENTION_CLASS, __init__=on_non_mla_layer_built))
    file = f", file={settings.scales_file}" if settings.scales_file else ""
    emulating = f", emulating {settings.emulate_fp8.name} in unquantised caches" if settings.emulate_fp8 else ""
    logger.info(f"kimi-dflash kv scales: mode={settings.mode.value}{file}{emulating}; waiting for vLLM's MLA layers")


def _check_mla_module_exists() -> None:
    import vllm

    relative = Path(*MLA_MODULE.split(".")[1:]).with_suffix(".py")
    for root in getattr(vllm, "__path__", []):
        if (Path(root) / relative).is_file():
            return
    supported = "the KV scale hook supports vLLM 0.20-0.33. Set KV_SCALE_MODE=off to start without it."
    version = getattr(vllm, "__version__", "?")
    raise RuntimeError(f"kimi-dflash kv scales: this vLLM ({version}) has no {MLA_MODULE}; {supported}")


def _call_after(cls: type, method: str, callback: Callable[[Any], None]) -> None:
    """Make ``cls.method`` call ``callback(self)`` once the original has run."""
    original = getattr(cls, method)

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        callback(self)
        return result

    setattr(cls, method, wrapper)


def _patch(module: ModuleType, name: str, **after: Callable[[Any], None]) -> bool:
    """Make ``module.name``'s methods call ``after[method](self)`` (once per class); False without such a class."""
    cls = getattr(module, name, None)
    if cls is not None and not getattr(cls, _PATCHED_MARKER, False):
        for method, callback in after.items():
            _call_after(cls, method, callback)
        setattr(cls, _PATCHED_MARKER, True)
    return cls is not None


def _patch_mla_module(module: ModuleType) -> None:
    if not _patch(module, MLA_CLASS, __init__=on_layer_built, process_weights_after_loading=on_layer_loaded):
        raise RuntimeError(f"kimi-dflash kv scales: {MLA_MODULE} has no {MLA_CLASS}; cannot hook the KV write path")
    logger.info("kimi-dflash kv scales: hooked %s.%s", MLA_MODULE, MLA_CLASS)


def on_non_mla_layer_built(layer: Any) -> None:
    """Say once per process that a non-MLA attention layer is left alone (e.g. the Qwen3 demo, a GQA drafter)."""
    state = _state
    if state is None or state.non_mla_logged:
        return
    state.non_mla_logged = True
    logger.info(
        f"kimi-dflash kv scales: {getattr(layer, 'layer_name', '?')} is not MLA attention (KV cache dtype "
        f"{getattr(layer, 'kv_cache_dtype', '?')!r}): the KV scale hook leaves non-MLA layers alone (no-op)"
    )


def on_layer_built(layer: Any) -> None:
    """Decide what to do for one freshly built MLA layer and wrap its KV write."""
    from vllm.config import get_current_vllm_config

    from kimi_dflash.kvscale.write_hook import LayerHook, wrap_kv_cache_update

    state = _state
    if state is None:
        return
    settings = state.settings
    name = str(layer.layer_name)
    kv_dtype = str(layer.kv_cache_dtype)
    with state.lock:
        if state.identity is None:
            served = get_current_vllm_config().model_config
            fingerprint = scales_file.fingerprint_from_hf_config(served.hf_config)
            state.identity = scales_file.ModelIdentity(str(served.model), fingerprint)
        identity = state.identity

    fp8 = emulate = None
    if kv_dtype in E4M3_KV_DTYPES:
        fp8 = fp8_format_for(kv_dtype, fnuz_platform=platform_is_fnuz())
    elif settings.emulate_fp8 is not None and kv_dtype in UNQUANTISED_KV_DTYPES:
        fp8 = emulate = settings.emulate_fp8

    calibrated = None
    if settings.mode is Mode.CALIBRATED:
        assert state.scales is not None
        # A wrong file is an error even without an FP8 cache; names only for FP8 layers (a BF16 drafter has none).
        scales_file.check_model_match(state.scales, identity)
        if fp8 is not None:
            calibrated = max(scales_file.scale_for_layer(state.scales, name).amax / fp8.max_value, settings.floor)

    if settings.sets_scales and fp8 is None and not state.noop_logged:
        state.noop_logged = True
        cache = f"KV cache dtype of {name} is {kv_dtype!r}, not a per-tensor FP8 E4M3 cache"
        logger.info(f"kimi-dflash kv scales: {cache}: {settings.mode.value} mode leaves the scales alone (no-op)")

    observing = settings.mode is Mode.OBSERVE or settings.observe_dir is not None
    dynamic = settings.mode is Mode.DYNAMIC and fp8 is not None
    if not (dynamic or calibrated is not None or observing or emulate is not None):
        return
    limits = (settings.floor, settings.warmup_steps)
    hook = LayerHook(name, kv_dtype, fp8, dynamic, calibrated, emulate, *limits, observing)
    layer.impl.do_kv_cache_update = wrap_kv_cache_update(layer.impl.do_kv_cache_update, hook)
    if observing:
        _watch_decode_query(layer, hook)
    with state.lock:
        if not state.hooks:
            logger.info(f"kimi-dflash kv scales: {settings.mode.value} cache {kv_dtype!r} on {name}: {_describe(hook)}")
        state.hooks[name] = hook
        if settings.observe_dir is not None and state.dumper is None:
            from kimi_dflash.kvscale.observer import ObserveDumper

            version = str(getattr(sys.modules.get("vllm"), "__version__", "unknown"))  # a label in the observe file
            dumped = (settings.observe_dir, settings.observe_interval)
            state.dumper = ObserveDumper(*dumped, state.hooks, identity, version)
            state.dumper.start()


def _watch_decode_query(layer: Any, hook: Any) -> None:
    """Record the decode query's amax (observe mode): with an FP8 query (AITER MLA) vLLM quantises it by `_q_scale`."""
    from kimi_dflash.kvscale.write_hook import wrap_decode_query, wrap_query_quant

    forward_mqa = getattr(layer.impl, "forward_mqa", None)
    if forward_mqa is not None:
        layer.impl.forward_mqa = wrap_decode_query(forward_mqa, hook)
    quant = getattr(layer, "_decode_concat_quant_fp8_op", None)
    if quant is not None:
        quant.forward = wrap_query_quant(quant.forward, hook)
    if forward_mqa is None and quant is None:
        unseen = f"{hook.name} has neither impl.forward_mqa nor _decode_concat_quant_fp8_op"
        logger.info(f"kimi-dflash kv scales: {unseen}; the decode query's amax is not recorded")


def _describe(hook: Any) -> str:
    parts = []
    if hook.dynamic:
        frozen = f"frozen after {hook.warmup_writes} writes (then the hook adds no op)" if hook.warmup_writes else ""
        amax = f"running amax / {hook.fp8.max_value:g} ({hook.fp8.name}), floor {hook.floor:g}"
        parts.append(f"k_scale follows the {amax}, {frozen or 'never frozen'}")
    if hook.calibrated_scale is not None:
        parts.append(f"calibrated k_scale {hook.calibrated_scale:.4g} ({hook.fp8.name})")
    if hook.emulate is not None:
        parts.append(f"EMULATING {hook.emulate.name} storage in an unquantised cache (test aid, not for serving)")
    return "; ".join(parts) or "observing amax only, scales untouched"


def on_layer_loaded(layer: Any) -> None:
    """After vLLM finalised the layer's weights and scales: bind stats to its device, apply static scales."""
    from kimi_dflash.kvscale.write_hook import apply_static_scale

    state = _state
    if state is None:
        return
    hook = state.hooks.get(str(layer.layer_name))
    if hook is None:
        return
    k_scale = getattr(layer, "_k_scale", None)
    if k_scale is not None:
        hook.k_scale = k_scale
        hook.stats.to_(k_scale.device)
        hook.query.to_(k_scale.device)
    if hook.calibrated_scale is not None:
        apply_static_scale(layer, hook.calibrated_scale)
        hook.scale_applied = True
        with state.lock:
            state.applied += 1
            applied = state.applied
        logger.debug("kimi-dflash kv scales: %s k_scale=%.6g (calibrated)", hook.name, hook.calibrated_scale)
        if applied == 1 or applied == len(state.hooks):
            scales = [h.calibrated_scale for h in state.hooks.values() if h.calibrated_scale is not None]
            logger.info(
                f"kimi-dflash kv scales: calibrated scales applied to {applied}/{len(state.hooks)} MLA layers in pid "
                f"{os.getpid()} (range {min(scales):.4g}-{max(scales):.4g}, {hook.fp8.name if hook.fp8 else '?'})"
            )
    elif hook.dynamic and hook.fp8 is not None:
        logger.debug("kimi-dflash kv scales: %s: %s", hook.name, _describe(hook))
