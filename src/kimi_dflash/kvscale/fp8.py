"""FP8 formats a KV cache can use, and which one a ``kv_cache_dtype`` means on a platform (no torch: stays cheap)."""

from __future__ import annotations

from dataclasses import dataclass

# vLLM's per-tensor-scaled FP8 KV dtypes ("fp8_ds_mla" and the like carry their own per-tile scales).
SCALED_FP8_KV_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")
E4M3_KV_DTYPES = ("fp8", "fp8_e4m3")  # the scales the hook manages (E5M2's range needs none)


@dataclass(frozen=True)
class Fp8Format:
    name: str  # e4m3fn | e4m3fnuz | e5m2
    max_value: float  # largest finite magnitude
    torch_dtype_name: str  # attribute of the torch module

    def torch_dtype(self):  # -> torch.dtype (torch imported lazily)
        import torch

        return getattr(torch, self.torch_dtype_name)


E4M3FN = Fp8Format("e4m3fn", 448.0, "float8_e4m3fn")
E4M3FNUZ = Fp8Format("e4m3fnuz", 240.0, "float8_e4m3fnuz")  # gfx942 (MI300X): no negative zero, bias 8
E5M2 = Fp8Format("e5m2", 57344.0, "float8_e5m2")

FORMATS = {f.name: f for f in (E4M3FN, E4M3FNUZ, E5M2)}


def is_scaled_fp8_kv(kv_cache_dtype: str) -> bool:
    """True when vLLM stores this KV dtype as FP8 with one per-tensor scale (the scale we manage)."""
    return kv_cache_dtype in SCALED_FP8_KV_DTYPES


def fp8_format_for(kv_cache_dtype: str, *, fnuz_platform: bool) -> Fp8Format:
    """The E4M3 encoding vLLM stores ``kv_cache_dtype`` in (fnuz on gfx942): the dtypes whose scale the hook sets."""
    if kv_cache_dtype not in E4M3_KV_DTYPES:
        raise ValueError(f"{kv_cache_dtype!r} is not a per-tensor-scaled FP8 E4M3 KV cache dtype {E4M3_KV_DTYPES}")
    return E4M3FNUZ if fnuz_platform else E4M3FN


def platform_is_fnuz() -> bool:
    """Whether the running vLLM platform stores E4M3 as fnuz (ROCm gfx942). False when it cannot tell."""
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_fp8_fnuz())
    except Exception:  # noqa: BLE001 - CPU builds and old versions have no answer: E4M3FN
        return False
