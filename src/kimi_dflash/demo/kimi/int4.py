"""Kimi K2.6's routed experts as INT4 compressed-tensors (docs/demo-models.md, "The INT4 twin"); the float experts
are built on this grid, so the INT4 checkpoint dequantizes to exactly the bfloat16 one."""

from __future__ import annotations

import numpy as np

from kimi_dflash.demo.encoding import kimi_config_fragment
from kimi_dflash.demo.kimi import layout

PACK_FACTOR = 8  # 32 bits / 4
INT4_MIN, INT4_MAX = -8, 7


def quantize(matrix: np.ndarray, group: int = layout.INT4_GROUP_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """(int8 values in -8..7 [rows, cols], scales [rows, cols / group]) with value * scale ~ matrix; each scale is
    the smallest power of two that keeps its group's |value| <= 7."""
    rows, cols = matrix.shape
    if cols % group:
        raise ValueError(f"{cols} input features are not a multiple of the INT4 group size {group}")
    grouped = matrix.reshape(rows, cols // group, group)
    amax = np.abs(grouped).max(axis=2)
    scales = np.exp2(np.ceil(np.log2(np.where(amax > 0, amax, 1.0) / INT4_MAX)))
    grouped = grouped / scales[:, :, None]
    values = np.clip(np.rint(grouped), INT4_MIN, INT4_MAX).astype(np.int8)
    return values.reshape(rows, cols), scales


def dequantize(values: np.ndarray, scales: np.ndarray, group: int = layout.INT4_GROUP_SIZE) -> np.ndarray:
    rows, cols = values.shape
    grouped = values.reshape(rows, cols // group, group).astype(np.float64) * scales[:, :, None]
    return grouped.reshape(rows, cols)


def snap_to_int4_grid(matrix: np.ndarray) -> np.ndarray:
    """The nearest matrix INT4 group-32 represents exactly (also exact in bfloat16: |value| <= 8, scale 2^k)."""
    return dequantize(*quantize(matrix))


def pack_int32(values: np.ndarray) -> np.ndarray:
    """int8 [rows, cols] in -8..7 -> int32 [rows, cols / 8], value + 8 in 4-bit lanes, lowest lane first."""
    rows, cols = values.shape
    if cols % PACK_FACTOR:
        raise ValueError(f"{cols} columns cannot be packed eight to an int32")
    lanes = (values.astype(np.int64) - INT4_MIN).reshape(rows, cols // PACK_FACTOR, PACK_FACTOR)
    shifts = np.arange(PACK_FACTOR, dtype=np.int64) * 4
    packed = (lanes << shifts).sum(axis=2)
    return packed.astype(np.uint32).view(np.int32)


def compressed_expert_tensors(name: str, matrix: np.ndarray) -> dict[str, np.ndarray]:
    """`<module>.weight` (on the INT4 grid) -> the three compressed-tensors tensors (scales exact in bfloat16)."""
    if not name.endswith(".weight"):
        raise ValueError(f"{name} is not a weight")
    module = name[: -len(".weight")]
    values, scales = quantize(matrix)
    if not np.array_equal(dequantize(values, scales), matrix):
        raise ValueError(f"{name} is not on the INT4 grid; build it with snap_to_int4_grid")
    return {
        f"{module}.weight_packed": pack_int32(values),
        f"{module}.weight_scale": scales.astype(np.float32),
        f"{module}.weight_shape": np.array(matrix.shape, dtype=np.int64),
    }


def quantization_config() -> dict[str, object]:
    """The `quantization_config` Kimi K2.6 carries in its text_config: only routed experts are INT4."""
    return kimi_config_fragment("quantization_config")
