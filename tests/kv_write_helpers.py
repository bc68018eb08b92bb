"""Shared test helpers for the KV write hook: a reference MLA cache writer (what vLLM's concat_and_cache_mla does)
and a seeded decode batch. A fixtures module: test files import it, never each other."""

from __future__ import annotations

import torch

KV_LORA, ROPE = 512, 64


def reference_write(kv_c_normed, k_pe, kv_cache, slot_mapping, kv_cache_dtype, k_scale):
    """What vLLM's concat_and_cache_mla does for an FP8 cache: saturate(x / k_scale) -> FP8, per written slot.

    Written without host syncs (index_copy_ over masked rows) so the sync trap below can wrap it too.
    """
    fp8 = torch.float8_e4m3fn if kv_cache_dtype == "fp8" else torch.float8_e4m3fnuz
    rows = slot_mapping.numel()
    flat = kv_cache.view(-1, KV_LORA + ROPE)
    latent = torch.cat([kv_c_normed[:rows], k_pe[:rows].reshape(rows, ROPE)], dim=1).to(torch.float32)
    limit = torch.finfo(fp8).max
    encoded = (latent / k_scale).clamp(-limit, limit).to(fp8).view(torch.uint8)
    slots = slot_mapping.reshape(-1).clamp_min(0)
    keep = (slot_mapping.reshape(-1) >= 0)[:, None]
    flat.view(torch.uint8).index_copy_(0, slots, torch.where(keep, encoded, flat.view(torch.uint8)[slots]))


def reference_write_033(kv_c_normed, k_pe, kv_cache, slot_mapping, kv_cache_dtype, k_scale, skip_scale=False):
    """vLLM 0.33's signature: skip_scale=True makes the kernel ignore k_scale."""
    reference_write(
        kv_c_normed, k_pe, kv_cache, slot_mapping, kv_cache_dtype, torch.ones_like(k_scale) if skip_scale else k_scale
    )


def batch(tokens: int = 12, seed: int = 0, magnitude: float = 40.0):
    generator = torch.Generator().manual_seed(seed)
    kv_c = (torch.randn(tokens, KV_LORA, generator=generator) * magnitude).to(torch.bfloat16)
    k_pe = (torch.randn(tokens, 1, ROPE, generator=generator) * magnitude / 4).to(torch.bfloat16)
    cache = torch.zeros(4, 16, KV_LORA + ROPE, dtype=torch.uint8)
    slots = torch.arange(tokens) * 3 % 64
    return kv_c, k_pe, cache, slots
