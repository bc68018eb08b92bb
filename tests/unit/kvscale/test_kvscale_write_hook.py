"""The do_kv_cache_update wrapper on real tensors, against the same writer called unwrapped."""

from __future__ import annotations

import inspect
import re
from contextlib import contextmanager

import pytest

pytest.importorskip("torch", reason="needs the cpu extra (launchers/setup-cpu.sh)")

import torch

from kimi_dflash.kvscale import scale_math, write_hook
from kimi_dflash.kvscale.fp8 import E4M3FN, E4M3FNUZ
from kimi_dflash.kvscale.write_hook import (
    LayerHook,
    wrap_kv_cache_update,
)
from kv_write_helpers import KV_LORA, ROPE, batch, reference_write, reference_write_033


def dynamic_hook(fmt=E4M3FN, warmup: int = 0) -> LayerHook:
    return LayerHook(
        name="model.layers.0.self_attn.attn",
        kv_cache_dtype="fp8",
        fp8=fmt,
        dynamic=True,
        floor=1e-4,
        warmup_writes=warmup,
    )


def expected_scale(kv_c, k_pe, fp8_max: float) -> torch.Tensor:
    amax = max(kv_c.float().abs().max().item(), k_pe.float().abs().max().item())
    return torch.tensor(amax / fp8_max, dtype=torch.float64).to(torch.float32)


def test_dynamic_wrapper_sets_the_scale_before_the_write_and_matches_the_unwrapped_writer() -> None:
    kv_c, k_pe, cache, slots = batch()
    k_scale = torch.tensor(1.0)
    wrapped = wrap_kv_cache_update(reference_write, dynamic_hook())
    wrapped(kv_c, k_pe, cache, slots, "fp8", k_scale)

    scale = expected_scale(kv_c, k_pe, 448.0)
    assert torch.equal(k_scale, scale)  # the layer's own tensor, updated in place
    reference_cache = torch.zeros_like(cache)
    reference_write(kv_c, k_pe, reference_cache, slots, "fp8", scale)
    assert torch.equal(cache, reference_cache)  # byte for byte


def test_unscaled_write_clips_what_the_dynamic_scale_keeps() -> None:
    kv_c, k_pe, cache, slots = batch(magnitude=400.0)  # amax well past 448
    unscaled = torch.zeros_like(cache)
    reference_write(kv_c, k_pe, unscaled, slots, "fp8", torch.tensor(1.0))
    k_scale = torch.tensor(1.0)
    wrap_kv_cache_update(reference_write, dynamic_hook())(kv_c, k_pe, cache, slots, "fp8", k_scale)

    truth = torch.cat([kv_c, k_pe.reshape(-1, ROPE)], dim=1).float()
    flat_slots = slots.long()

    def decoded(c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return c.view(-1, KV_LORA + ROPE)[flat_slots].view(torch.float8_e4m3fn).float() * s

    error_unscaled = (decoded(unscaled, torch.tensor(1.0)) - truth).abs().max()
    error_dynamic = (decoded(cache, k_scale) - truth).abs().max()
    assert error_unscaled > 400.0 and error_dynamic < error_unscaled / 4


def test_fnuz_format_uses_240() -> None:
    kv_c, k_pe, cache, slots = batch()
    k_scale = torch.tensor(1.0)
    wrap_kv_cache_update(reference_write, dynamic_hook(E4M3FNUZ))(kv_c, k_pe, cache, slots, "fp8_fnuz", k_scale)
    assert torch.equal(k_scale, expected_scale(kv_c, k_pe, 240.0))


@pytest.mark.parametrize("style", ["positional", "keywords", "mixed"])
def test_signature_agnostic_for_vllm_032(style: str) -> None:
    kv_c, k_pe, cache, slots = batch(seed=3)
    k_scale = torch.tensor(1.0)
    wrapped = wrap_kv_cache_update(reference_write, dynamic_hook())
    if style == "positional":
        wrapped(kv_c, k_pe, cache, slots, "fp8", k_scale)
    elif style == "keywords":
        wrapped(kv_c_normed=kv_c, k_pe=k_pe, kv_cache=cache, slot_mapping=slots, kv_cache_dtype="fp8", k_scale=k_scale)
    else:
        wrapped(kv_c, k_pe, cache, slot_mapping=slots, kv_cache_dtype="fp8", k_scale=k_scale)
    assert torch.equal(k_scale, expected_scale(kv_c, k_pe, 448.0))


@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_vllm_033_skip_scale_is_overridden_when_we_own_the_scale(how: str) -> None:
    """0.33 passes skip_scale=True when _k_scale_float == 1.0; with a device-side scale that would write unscaled."""
    kv_c, k_pe, cache, slots = batch(seed=4, magnitude=300.0)
    k_scale = torch.tensor(1.0)
    wrapped = wrap_kv_cache_update(reference_write_033, dynamic_hook())
    if how == "positional":
        wrapped(kv_c, k_pe, cache, slots, "fp8", k_scale, True)
    else:
        wrapped(kv_c, k_pe, cache, slots, "fp8", k_scale, skip_scale=True)
    reference_cache = torch.zeros_like(cache)
    reference_write(kv_c, k_pe, reference_cache, slots, "fp8", expected_scale(kv_c, k_pe, 448.0))
    assert torch.equal(cache, reference_cache)


def test_observe_only_passes_the_very_same_arguments_through() -> None:
    seen = {}

    def inner(*args, **kwargs):
        seen["args"], seen["kwargs"] = args, kwargs

    hook = LayerHook(name="l0", kv_cache_dtype="auto", fp8=None, observing=True)
    kv_c, k_pe, cache, slots = batch(seed=5)
    k_scale = torch.tensor(1.0)
    wrap_kv_cache_update(inner, hook)(kv_c, k_pe, cache, slots, "auto", k_scale, True)
    assert all(a is b for a, b in zip(seen["args"], (kv_c, k_pe, cache, slots, "auto", k_scale, True)))
    assert k_scale.item() == 1.0
    assert hook.stats.amax.item() == max(kv_c.float().abs().max().item(), k_pe.float().abs().max().item())
    assert hook.stats.tokens.item() == 12


def test_profile_run_with_empty_cache_is_not_observed() -> None:
    hook = dynamic_hook()
    kv_c, k_pe, _, slots = batch()
    k_scale = torch.tensor(1.0)
    calls = []
    wrap_kv_cache_update(lambda *a, **k: calls.append(a), hook)(kv_c, k_pe, torch.empty(0), slots, "fp8", k_scale)
    wrap_kv_cache_update(lambda *a, **k: calls.append(a), dynamic_hook())(
        kv_c, k_pe, torch.zeros(1), None, "fp8", k_scale
    )
    assert len(calls) == 2 and hook.stats.writes.item() == 0 and k_scale.item() == 1.0


def test_calibrated_scale_must_have_been_applied_before_the_first_write() -> None:
    hook = LayerHook(name="l0", kv_cache_dtype="fp8", fp8=E4M3FN, calibrated_scale=0.05)
    kv_c, k_pe, cache, slots = batch()
    with pytest.raises(RuntimeError, match="never applied"):
        wrap_kv_cache_update(reference_write, hook)(kv_c, k_pe, cache, slots, "fp8", torch.tensor(1.0))


def test_wrapping_twice_is_refused() -> None:
    wrapped = wrap_kv_cache_update(reference_write, dynamic_hook())
    with pytest.raises(RuntimeError, match="already wrapped"):
        wrap_kv_cache_update(wrapped, dynamic_hook())


SYNC_METHODS = ("item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__")


@contextmanager
def host_sync_forbidden():
    """Make every Tensor method that copies a value to the host raise while the block runs."""
    saved = {name: getattr(torch.Tensor, name) for name in SYNC_METHODS}

    def trap(name):
        def raiser(*args, **kwargs):
            raise AssertionError(f"host sync in the KV write path: Tensor.{name}()")

        return raiser

    try:
        for name in SYNC_METHODS:
            setattr(torch.Tensor, name, trap(name))
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def test_trap_really_catches_a_sync() -> None:
    with host_sync_forbidden(), pytest.raises(AssertionError, match="host sync"):
        torch.tensor(1.0).item()


@pytest.mark.parametrize("warmup", [0, 2])
def test_dynamic_and_emulated_write_path_never_syncs(warmup: int) -> None:
    kv_c, k_pe, cache, slots = batch()
    slots[3] = -1  # padding row
    k_scale = torch.tensor(1.0)
    dynamic = wrap_kv_cache_update(reference_write_033, dynamic_hook(warmup=warmup))
    emulating = wrap_kv_cache_update(
        lambda *a, **k: None, LayerHook(name="l1", kv_cache_dtype="auto", fp8=E4M3FN, dynamic=True, emulate=E4M3FN)
    )
    with host_sync_forbidden():
        for _ in range(3):
            dynamic(kv_c, k_pe, cache, slots, "fp8", k_scale, skip_scale=True)
            emulating(kv_c, k_pe, torch.zeros(1), slots, "auto", torch.tensor(1.0))
    assert k_scale.item() > 0


def test_hot_path_source_has_no_host_reads() -> None:
    sources = [
        inspect.getsource(write_hook.wrap_kv_cache_update),
        inspect.getsource(scale_math.batch_latent_amax),
        inspect.getsource(scale_math.LatentStats.observe_),
        inspect.getsource(scale_math.follow_running_amax_),
        inspect.getsource(scale_math.quantize_dequantize),
        inspect.getsource(scale_math.row_amax),
    ]
    for source in sources:
        code = "\n".join(line.split("#")[0] for line in source.splitlines())
        assert not re.search(r"\.(item|tolist|cpu|numpy)\(|\bfloat\(|\bbool\(", code), source
