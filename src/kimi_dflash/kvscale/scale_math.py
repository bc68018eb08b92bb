"""The KV-scale arithmetic for MLA latents, as tensor ops that never leave the device.

MLA caches one row per token: the normalised latent ``kv_c_normed`` (kv_lora_rank values) next to
the rotary key ``k_pe``; vLLM quantises both with the layer's single ``k_scale``. So the scale must
cover max(|kv_c_normed|, |k_pe|):  k_scale = amax / fp8_max, kept above a floor.

Everything here runs inside vLLM's forward pass, possibly under CUDA-graph capture, so: no
``.item()``, no ``.tolist()``, no Python ``if`` on tensor values, no new persistent tensors - only
in-place updates of tensors allocated up front. Python-level branches depend on configuration and
shapes only (shapes are host metadata, reading them does not synchronise).
"""

from __future__ import annotations

import torch

INF = float("inf")


def row_amax(x: torch.Tensor, rows: int) -> torch.Tensor:
    """Per-row max |x| over everything but the first dimension, as float32 (exact: max never rounds).

    One fused op (the infinity norm): the hook runs once per MLA layer per step in eager mode, where every
    extra op is another kernel launch."""
    return torch.linalg.vector_norm(x[:rows], ord=INF, dim=tuple(range(1, x.dim())), dtype=torch.float32)


def batch_latent_amax(
    kv_c_normed: torch.Tensor, k_pe: torch.Tensor, slot_mapping: torch.Tensor, *, count_tokens: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(amax, tokens) of one KV write, both 0-dim tensors on the input's device (tokens None when not counted).

    Only rows that are really written count: vLLM writes ``slot_mapping.numel()`` rows and marks
    padding (e.g. CUDA-graph padding) with slot -1. Rows holding a non-finite value are ignored - no
    scale can represent them, and letting one through would poison the running maximum forever.
    Seven ops (eight counting tokens) whatever the batch size.
    """
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
        """Fold one write into the running statistics. `count_tokens=False` skips the token count (only the
        observe dumps report it) to save an op per layer per step."""
        batch_amax, batch_tokens = batch_latent_amax(kv_c_normed, k_pe, slot_mapping, count_tokens=count_tokens)
        torch.maximum(self.amax, batch_amax, out=self.amax)
        if batch_tokens is not None:
            self.tokens.add_(batch_tokens)
        self.writes.add_(1)


class QueryStats(_DeviceStats):
    """Running max |decode query| of one MLA layer: with an FP8 cache, vLLM quantises this query with
    `_q_scale`, which stays 1.0 for checkpoints without a q scale - observe mode records it so a GPU run can
    tell whether that clips (amax above the FP8 maximum) or underflows."""

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
    k_scale: torch.Tensor,
    stats: LatentStats,
    *,
    fp8_max: float,
    floor: float,
    warmup_writes: int,
) -> None:
    """Set ``k_scale`` in place from the running amax (call after ``stats.observe_``).

    ``warmup_writes`` = 0: the scale follows the running amax for the whole life of the server.
    ``warmup_writes`` = N > 0: it follows for the first N writes of the layer and is then frozen, so
    every entry written afterwards shares one scale. The gate is a device-side comparison, so it
    keeps counting correctly when the call is replayed from a captured CUDA graph.
    """
    target = scale_from_amax(stats.amax, fp8_max, floor)
    if warmup_writes <= 0:
        k_scale.copy_(target.expand_as(k_scale))
        return
    still_warming = stats.writes <= warmup_writes
    k_scale.copy_(torch.where(still_warming, target, k_scale))


def quantize_dequantize(x: torch.Tensor, scale: torch.Tensor, fp8_torch_dtype: torch.dtype) -> torch.Tensor:
    """What reading back an FP8 cache entry gives: saturate(x / scale) on the FP8 grid, times scale.

    vLLM's cache-write kernels convert with saturation (out-of-range values become +-max), whereas
    a plain torch cast would produce NaN; hence the explicit clamp. Returns a new tensor in x.dtype.
    """
    fp8_max = torch.finfo(fp8_torch_dtype).max
    scale32 = scale.to(torch.float32)
    scaled = (x.to(torch.float32) / scale32).clamp(-fp8_max, fp8_max)
    return (scaled.to(fp8_torch_dtype).to(torch.float32) * scale32).to(x.dtype)
