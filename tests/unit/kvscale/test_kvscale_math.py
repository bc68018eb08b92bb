"""KV-scale arithmetic on real torch tensors, checked against an independent float64 / brute-force reference."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch", reason="needs the cpu extra (launchers/setup-cpu.sh)")

import torch

from kimi_dflash.kvscale.fp8 import E4M3FN, E4M3FNUZ, fp8_format_for
from kimi_dflash.kvscale.scale_math import (
    LatentStats,
    batch_latent_amax,
    follow_running_amax_,
    quantize_dequantize,
    scale_from_amax,
)


def reference_amax(kv_c: torch.Tensor, k_pe: torch.Tensor, slots: list[int] | None) -> float:
    """Plain-Python reference: max |value| over the rows that are written (slot >= 0), finite values only."""
    rows = kv_c.shape[0] if slots is None else min(len(slots), kv_c.shape[0])
    best = 0.0
    for row in range(rows):
        if slots is not None and slots[row] < 0:
            continue
        values = kv_c[row].double().reshape(-1).tolist() + k_pe[row].double().reshape(-1).tolist()
        row_max = max(abs(v) for v in values)
        if math.isfinite(row_max):
            best = max(best, row_max)
    return best


def reference_scale(amax: float, fp8_max: float, floor: float) -> torch.Tensor:
    # float64 division rounded once to float32 equals float32 IEEE division (no double-rounding issue for /).
    return torch.tensor(max(amax / fp8_max, floor), dtype=torch.float64).to(torch.float32)


def latents(tokens: int, *, seed: int, dtype=torch.bfloat16, scale: float = 3.0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    kv_c = (torch.randn(tokens, 512, generator=generator) * scale).to(dtype)
    k_pe = (torch.randn(tokens, 1, 64, generator=generator) * scale).to(dtype)  # vLLM passes k_pe unsqueezed
    return kv_c, k_pe


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_batch_amax_and_scale_match_reference_on_random_tensors(seed: int, dtype: torch.dtype) -> None:
    kv_c, k_pe = latents(37, seed=seed, dtype=dtype)
    slots = torch.arange(37)
    amax, tokens = batch_latent_amax(kv_c, k_pe, slots)
    expected = reference_amax(kv_c, k_pe, slots.tolist())
    assert amax.dtype == torch.float32 and amax.dim() == 0
    assert amax.item() == expected
    assert tokens.item() == 37
    for fmt in (E4M3FN, E4M3FNUZ):
        assert torch.equal(scale_from_amax(amax, fmt.max_value, 1e-4), reference_scale(expected, fmt.max_value, 1e-4))


def test_outlier_in_k_pe_sets_the_scale() -> None:
    kv_c, k_pe = latents(8, seed=1)
    k_pe[5, 0, 17] = -8192.0  # the rope part can hold the outlier; MLA shares one scale for both
    amax, _ = batch_latent_amax(kv_c, k_pe, torch.arange(8))
    assert amax.item() == 8192.0 == reference_amax(kv_c, k_pe, list(range(8)))


def test_outlier_in_a_padding_row_is_ignored() -> None:
    kv_c, k_pe = latents(6, seed=2)
    kv_c[4, 3] = 1.0e4  # row 4 is CUDA-graph padding: slot -1, never written
    slots = torch.tensor([10, 11, 12, 13, -1, 14])
    amax, tokens = batch_latent_amax(kv_c, k_pe, slots)
    assert amax.item() == reference_amax(kv_c, k_pe, slots.tolist()) < 1.0e4
    assert tokens.item() == 5


def test_rows_beyond_the_slot_mapping_are_ignored() -> None:
    kv_c, k_pe = latents(10, seed=3)
    kv_c[9] = 5000.0  # vLLM writes slot_mapping.numel() rows; extra rows are padding
    amax, tokens = batch_latent_amax(kv_c, k_pe, torch.arange(8))
    assert amax.item() == reference_amax(kv_c, k_pe, list(range(8))) < 5000.0
    assert tokens.item() == 8


def test_non_finite_rows_do_not_poison_the_maximum() -> None:
    kv_c, k_pe = latents(5, seed=4)
    kv_c[1, 0] = float("nan")
    k_pe[3, 0, 0] = float("inf")
    amax, _ = batch_latent_amax(kv_c, k_pe, torch.arange(5))
    assert math.isfinite(amax.item())
    assert amax.item() == reference_amax(kv_c, k_pe, list(range(5)))


def test_empty_batch_and_all_zero_batch_give_the_floor() -> None:
    empty = torch.empty(0, 512, dtype=torch.bfloat16)
    amax, tokens = batch_latent_amax(
        empty, torch.empty(0, 1, 64, dtype=torch.bfloat16), torch.empty(0, dtype=torch.long)
    )
    assert amax.item() == 0.0 and tokens.item() == 0
    zeros = torch.zeros(4, 512, dtype=torch.bfloat16)
    amax, _ = batch_latent_amax(zeros, torch.zeros(4, 1, 64, dtype=torch.bfloat16), torch.arange(4))
    assert scale_from_amax(amax, 448.0, 1e-3).item() == pytest.approx(1e-3)
    assert torch.equal(scale_from_amax(amax, 448.0, 1e-3), reference_scale(0.0, 448.0, 1e-3))


def test_running_amax_is_the_max_over_batches() -> None:
    stats = LatentStats()
    expected = 0.0
    total = 0
    for seed, magnitude in enumerate([1.0, 7.0, 2.0, 30.0, 0.5]):
        kv_c, k_pe = latents(9, seed=seed, scale=magnitude)
        stats.observe_(kv_c, k_pe, torch.arange(9))
        expected = max(expected, reference_amax(kv_c, k_pe, list(range(9))))
        total += 9
        assert stats.amax.item() == expected
    assert stats.tokens.item() == total and stats.writes.item() == 5


def test_scale_follows_running_amax_without_warmup() -> None:
    stats, k_scale = LatentStats(), torch.tensor(1.0)
    for seed, magnitude in enumerate([1.0, 50.0, 3.0]):
        kv_c, k_pe = latents(4, seed=seed, scale=magnitude)
        stats.observe_(kv_c, k_pe, torch.arange(4))
        follow_running_amax_(k_scale, stats, fp8_max=448.0, floor=1e-4, warmup_writes=0)
        assert torch.equal(k_scale, reference_scale(stats.amax.item(), 448.0, 1e-4))


def test_scale_freezes_after_warmup() -> None:
    stats, k_scale = LatentStats(), torch.tensor(1.0)
    history = []
    for seed, magnitude in enumerate([1.0, 2.0, 3.0, 400.0, 900.0]):
        kv_c, k_pe = latents(4, seed=seed, scale=magnitude)
        stats.observe_(kv_c, k_pe, torch.arange(4))
        follow_running_amax_(k_scale, stats, fp8_max=448.0, floor=1e-4, warmup_writes=3)
        history.append(k_scale.item())
    assert history[0] < history[1] < history[2]  # follows during the 3 warm-up writes
    assert history[2] == history[3] == history[4]  # then frozen, though the amax kept growing
    assert stats.amax.item() > history[4] * 448.0  # the statistics still track it


def fp8_grid(dtype: torch.dtype) -> torch.Tensor:
    codes = torch.arange(256, dtype=torch.uint8).view(dtype).to(torch.float64)
    return torch.unique(codes[torch.isfinite(codes)])


@pytest.mark.parametrize("fmt", [E4M3FN, E4M3FNUZ], ids=lambda f: f.name)
def test_quantize_dequantize_rounds_to_the_nearest_grid_point_and_saturates(fmt) -> None:
    dtype = fmt.torch_dtype()
    grid = fp8_grid(dtype)
    assert grid.max().item() == fmt.max_value
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(2000, generator=generator, dtype=torch.float32) * 2.0
    x[:10] = torch.tensor([1.0e4, -1.0e4, 1.0e-6, 0.0, -3.0, 2.5, 300.0, -300.0, 0.02, 5.0])
    scale = torch.tensor(0.01)  # float32; the reference uses the same float32 value, widened
    got = quantize_dequantize(x, scale, dtype)
    scaled = (x.to(torch.float64) / scale.double()).clamp(-fmt.max_value, fmt.max_value)
    distance = (scaled[:, None] - grid[None, :]).abs()
    nearest = grid[distance.argmin(dim=1)]
    two_best = distance.sort(dim=1).values[:, :2]
    clear = (two_best[:, 1] - two_best[:, 0]) > 1e-5 * (scaled.abs() + 1)  # skip near-ties (rounding-mode detail)
    expected = (nearest.to(torch.float32) * scale).to(torch.float32)
    assert clear.sum() > 1900
    assert torch.equal(got[clear], expected[clear])
    assert got.abs().max().item() == pytest.approx(fmt.max_value * 0.01, rel=1e-6)  # saturated, not NaN


def test_unscaled_e4m3_clips_large_latents_that_a_fitted_scale_keeps() -> None:
    kv_c, _ = latents(16, seed=9, scale=300.0)  # latents beyond 448: what scale 1.0 cannot hold
    dtype = E4M3FN.torch_dtype()
    unscaled_error = (quantize_dequantize(kv_c, torch.tensor(1.0), dtype).float() - kv_c.float()).abs().max()
    fitted = torch.tensor(kv_c.float().abs().max().item() / 448.0)
    fitted_error = (quantize_dequantize(kv_c, fitted, dtype).float() - kv_c.float()).abs().max()
    assert unscaled_error > 100.0  # clipped at 448
    assert fitted_error < unscaled_error / 4


def test_fp8_format_for_platform() -> None:
    assert fp8_format_for("fp8", fnuz_platform=False).max_value == 448.0
    assert fp8_format_for("fp8_e4m3", fnuz_platform=True).max_value == 240.0
    with pytest.raises(ValueError, match="not a per-tensor-scaled FP8"):
        fp8_format_for("auto", fnuz_platform=False)
