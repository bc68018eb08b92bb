"""The KV-scale arithmetic for MLA latents (docs/fp8-kv.md). Runs under CUDA-graph capture: no ``.item()``, no
Python ``if`` on tensor values, no new persistent tensors."""

from __future__ import annotations

import torch

INF = float("inf")


def row_amax(x: torch.Tensor, rows: int) -> torch.Tensor:
    """Per-row max |x| over all but the first dimension, as float32: one fused op (each op is a launch in eager)."""
    return torch.linalg.vector_norm(x[:rows], ord=INF, dim=tuple(range(1, x.dim())), dtype=torch.float32)


def batch_latent_amax(
    kv_c_normed: torch.Tensor, k_pe: torch.Tensor, slot_mapping: torch.Tensor, *, count_tokens: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(amax, tokens) of one KV write as 0-dim tensors, without padding (slot -1) or non-finite rows (poison)."""
    rows = min(slot_mapping.numel(), kv_c_normed.shape[0])
    if rows == 0:
        zero = torch.zeros((), dtype=torch.float32, device=kv_c_normed.device)
        return zero, torch.zeros((), dtype=torch.int64, device=kv_c_normed.device) if count_tokens else None
    per_row = torch.maximum(row_amax(kv_c_normed, rows), row_amax(k_pe, rows))
    per_row = torch.nan_to_num(per_row, nan=0.0, posinf=0.0)  # a NaN or inf in a row drops that row
    valid = slot_mapping.reshape(-1)[:rows] >= 0
    masked = torch.where(valid, per_row, 0.0)
    return masked.amax(), valid.sum() if count_tokens else None


def scale_from_amax(amax: torch.Tensor, fp8_max: float, floor: float) -> torch.Tensor:
    """k_scale = max(amax / fp8_max, floor): values up to amax land on the FP8 grid unclipped."""
    return torch.clamp_min(torch.div(amax, fp8_max), floor)


class _DeviceStats:
    """Running statistics held in device tensors (its only attributes), updated in place."""

    def to_(self, device: torch.device | str) -> None:
        """Move to ``device`` (once, at load time - never in the forward pass)."""
        for name, tensor in vars(self).items():
            setattr(self, name, tensor.to(device))


class LatentStats(_DeviceStats):
    """Running statistics of one MLA layer's KV writes."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.amax = torch.zeros((), dtype=torch.float32, device=device)
        self.tokens = torch.zeros((), dtype=torch.int64, device=device)
        self.writes = torch.zeros((), dtype=torch.int64, device=device)

    def observe_(
        self, kv_c_normed: torch.Tensor, k_pe: torch.Tensor, slot_mapping: torch.Tensor, *, count_tokens: bool = True
    ) -> None:
        """Fold one write into the running statistics (`count_tokens=False` saves an op per layer per step)."""
        batch_amax, batch_tokens = batch_latent_amax(kv_c_normed, k_pe, slot_mapping, count_tokens=count_tokens)
        torch.maximum(self.amax, batch_amax, out=self.amax)
        if batch_tokens is not None:
            self.tokens.add_(batch_tokens)
        self.writes.add_(1)


class QueryStats(_DeviceStats):
    """Running max |decode query| of one MLA layer, so a GPU run can tell whether `_q_scale` 1.0 clips it."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.amax = torch.zeros((), dtype=torch.float32, device=device)
        self.calls = torch.zeros((), dtype=torch.int64, device=device)

    def observe_(self, *parts: torch.Tensor) -> None:
        for part in parts:
            if part.numel():
                part_amax = torch.linalg.vector_norm(part, ord=INF, dtype=torch.float32)
                torch.maximum(self.amax, torch.nan_to_num(part_amax, nan=0.0, posinf=0.0), out=self.amax)
        self.calls.add_(1)


def follow_running_amax_(
    k_scale: torch.Tensor, stats: LatentStats, *, fp8_max: float, floor: float, warmup_writes: int
) -> None:
    """Set ``k_scale`` from the running amax for the first ``warmup_writes`` writes (0: always), gated on device."""
    target = scale_from_amax(stats.amax, fp8_max, floor)
    if warmup_writes <= 0:
        k_scale.copy_(target.expand_as(k_scale))
        return
    still_warming = stats.writes <= warmup_writes
    k_scale.copy_(torch.where(still_warming, target, k_scale))


def quantize_dequantize(x: torch.Tensor, scale: torch.Tensor, fp8_torch_dtype: torch.dtype) -> torch.Tensor:
    """What reading back an FP8 cache entry gives (clamped: vLLM's kernels saturate where a torch cast gives NaN)."""
    fp8_max = torch.finfo(fp8_torch_dtype).max
    scale32 = scale.to(torch.float32)
    scaled = (x.to(torch.float32) / scale32).clamp(-fp8_max, fp8_max)
    return (scaled.to(fp8_torch_dtype).to(torch.float32) * scale32).to(x.dtype)
