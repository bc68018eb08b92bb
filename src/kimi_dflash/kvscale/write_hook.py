"""The wrapper around an MLA impl's ``do_kv_cache_update``, the only place MLA latents enter the cache (how it
hooks and what it costs: docs/fp8-kv.md). Hot path under CUDA graphs: in-place tensor ops only."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kimi_dflash.kvscale.fp8 import Fp8Format
from kimi_dflash.kvscale.scale_math import LatentStats, QueryStats, follow_running_amax_, quantize_dequantize

# Parameter positions shared by every vLLM version we support (self is already bound).
ARG_KV_C_NORMED, ARG_K_PE, ARG_KV_CACHE, ARG_SLOT_MAPPING, ARG_KV_CACHE_DTYPE, ARG_K_SCALE, ARG_SKIP_SCALE = range(7)
ARG_NAMES = ("kv_c_normed", "k_pe", "kv_cache", "slot_mapping", "kv_cache_dtype", "k_scale", "skip_scale")
WRAPPED_MARKER = "__kimi_dflash_kv_hook__"


@dataclass
class LayerHook:
    """What the wrapper does for one MLA layer (decided once, when the layer is built)."""

    name: str
    kv_cache_dtype: str
    fp8: Fp8Format | None  # format the scale is for (the real cache's, or the emulated one); None = no scale
    dynamic: bool = False  # follow the running amax
    calibrated_scale: float | None = None  # static scale applied after weight loading
    emulate: Fp8Format | None = None  # BF16 cache: round-trip values through this FP8 format before storing
    floor: float = 1e-4
    warmup_writes: int = 0
    observing: bool = False  # observe dumps read tokens and the decode query's amax
    stats: LatentStats = field(default_factory=LatentStats)
    query: QueryStats = field(default_factory=QueryStats)
    k_scale: torch.Tensor | None = None  # the layer's _k_scale, known after weight loading
    scale_applied: bool = False
    eager_writes: int = 0  # real writes counted on the host (not in CUDA-graph capture)
    frozen: bool = False  # the dynamic warm-up is over: the wrapper stops computing anything

    @property
    def owns_scale(self) -> bool:
        return self.dynamic or self.calibrated_scale is not None

    @property
    def needs_statistics(self) -> bool:
        """A dynamic scale until it is frozen, or observe dumps; a calibrated or emulating hook computes none."""
        return (self.dynamic and not self.frozen) or self.observing

    def count_write(self, tensor: torch.Tensor) -> None:
        """Advance the host-side write count; freeze once a dynamic warm-up is over (nothing left to observe)."""
        if tensor.is_cuda and torch.cuda.is_current_stream_capturing():
            return  # capture runs are not traffic; the device-side gate judges replays
        self.eager_writes += 1
        if self.dynamic and 0 < self.warmup_writes <= self.eager_writes and not self.observing:
            self.frozen = True


def _get(args: tuple, kwargs: dict, index: int) -> Any:
    return args[index] if index < len(args) else kwargs.get(ARG_NAMES[index])


def _replace(args: list, kwargs: dict, index: int, value: Any) -> None:
    if index < len(args):
        args[index] = value
    else:
        kwargs[ARG_NAMES[index]] = value


def wrap_kv_cache_update(original: Callable[..., Any], hook: LayerHook) -> Callable[..., Any]:
    """Return ``original`` wrapped so that every KV write first updates ``hook`` (stats / scale / emulation)."""
    if getattr(original, WRAPPED_MARKER, None) is not None:
        raise RuntimeError(f"do_kv_cache_update of layer {hook.name} is already wrapped by kimi-dflash")

    @functools.wraps(original)
    def do_kv_cache_update(*args: Any, **kwargs: Any) -> Any:
        kv_c_normed = _get(args, kwargs, ARG_KV_C_NORMED)
        k_pe = _get(args, kwargs, ARG_K_PE)
        kv_cache = _get(args, kwargs, ARG_KV_CACHE)
        slot_mapping = _get(args, kwargs, ARG_SLOT_MAPPING)
        k_scale = _get(args, kwargs, ARG_K_SCALE)
        # No slots or no cache: vLLM's memory-profiling run, kept out of the statistics.
        if slot_mapping is None or kv_cache is None or kv_cache.numel() == 0:
            return original(*args, **kwargs)
        if hook.calibrated_scale is not None and not hook.scale_applied:
            why = "vLLM did not call MLAAttention.process_weights_after_loading"
            never = f"kimi-dflash: calibrated KV scale for {hook.name} was never applied ({why})"
            raise RuntimeError(f"{never}; refusing to write FP8 KV with scale 1.0")
        if hook.needs_statistics:
            if hook.stats.amax.device != kv_c_normed.device:  # one-time move if loading put it elsewhere
                hook.stats.to_(kv_c_normed.device)
            hook.stats.observe_(kv_c_normed, k_pe, slot_mapping, count_tokens=hook.observing)
            if hook.dynamic and hook.fp8 is not None:
                follow_running_amax_(
                    k_scale, hook.stats, fp8_max=hook.fp8.max_value, floor=hook.floor, warmup_writes=hook.warmup_writes
                )
            hook.count_write(kv_c_normed)

        if not (hook.owns_scale or hook.emulate is not None):
            return original(*args, **kwargs)
        new_args, new_kwargs = list(args), dict(kwargs)
        if hook.owns_scale and (len(args) > ARG_SKIP_SCALE or ARG_NAMES[ARG_SKIP_SCALE] in kwargs):
            _replace(new_args, new_kwargs, ARG_SKIP_SCALE, False)
        if hook.emulate is not None:
            dtype = hook.emulate.torch_dtype()
            _replace(new_args, new_kwargs, ARG_KV_C_NORMED, quantize_dequantize(kv_c_normed, k_scale, dtype))
            _replace(new_args, new_kwargs, ARG_K_PE, quantize_dequantize(k_pe, k_scale, dtype))
        return original(*new_args, **new_kwargs)

    setattr(do_kv_cache_update, WRAPPED_MARKER, hook)
    return do_kv_cache_update


def wrap_decode_query(original: Callable[..., Any], hook: LayerHook) -> Callable[..., Any]:
    """Wrap an MLA impl's decode `forward_mqa(q, ...)` to record its query's amax (an FP8 query is skipped)."""

    @functools.wraps(original)
    def forward_mqa(q: Any, *args: Any, **kwargs: Any) -> Any:
        parts = q if isinstance(q, (tuple, list)) else (q,)
        floats = [
            p for p in parts if isinstance(p, torch.Tensor) and p.dtype.is_floating_point and p.element_size() > 1
        ]
        if floats and len(floats) == len(parts):
            _observe_query(hook, floats)
        return original(q, *args, **kwargs)

    return forward_mqa


def wrap_query_quant(original: Callable[..., Any], hook: LayerHook) -> Callable[..., Any]:
    """Wrap MLAAttention's `_decode_concat_quant_fp8_op.forward` to record the query's amax before quantisation."""

    @functools.wraps(original)
    def forward(ql_nope: torch.Tensor, q_pe: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        _observe_query(hook, [ql_nope, q_pe])
        return original(ql_nope, q_pe, *args, **kwargs)

    return forward


def _observe_query(hook: LayerHook, parts: list[torch.Tensor]) -> None:
    if hook.query.amax.device != parts[0].device:
        hook.query.to_(parts[0].device)
    hook.query.observe_(*parts)


def apply_static_scale(layer: Any, scale: float) -> None:
    """Set a layer's KV scale on its device tensors and the host copies some backends read (after weight loading)."""
    for name in ("_k_scale", "_v_scale", "_k_scale_cpu", "_v_scale_cpu"):
        tensor = getattr(layer, name, None)
        if isinstance(tensor, torch.Tensor):
            tensor.fill_(scale)
    layer._k_scale_float = scale
    layer._v_scale_float = scale
