"""Tensors as Kimi K2.6's checkpoint stores them, in safetensors shards written here: numpy has no bfloat16, and
the `safetensors` package's numpy writer cannot produce it."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kimi_dflash.demo.encoding import json_bytes

SAFETENSORS_METADATA = {"format": "pt"}  # transformers refuses safetensors files without it
INDEX_FILE = "model.safetensors.index.json"
NUMPY_DTYPES = {"F32": np.dtype("<f4"), "I32": np.dtype("<i4"), "I64": np.dtype("<i8")}


@dataclass(frozen=True)
class Tensor:
    dtype: str  # safetensors dtype name: BF16, F32, I32, I64
    shape: tuple[int, ...]
    data: bytes


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float -> bfloat16 bit patterns (uint16), round to nearest even, as torch's .to(torch.bfloat16) does."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def tensor(values: np.ndarray, dtype: str) -> Tensor:
    if dtype == "BF16":
        data = bfloat16_bits(values).astype("<u2").tobytes()
    else:
        data = np.ascontiguousarray(values, dtype=NUMPY_DTYPES[dtype]).tobytes()
    return Tensor(dtype, tuple(int(d) for d in np.shape(values)), data)


def safetensors_bytes(tensors: Mapping[str, Tensor]) -> bytes:
    header: dict[str, object] = {"__metadata__": SAFETENSORS_METADATA}
    offset = 0
    for name in sorted(tensors):
        item, end = tensors[name], offset + len(tensors[name].data)
        header[name] = {"dtype": item.dtype, "shape": list(item.shape), "data_offsets": [offset, end]}
        offset = end
    encoded = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # data starts 8-byte aligned
    return struct.pack("<Q", len(encoded)) + encoded + b"".join(tensors[name].data for name in sorted(tensors))


def sharded_files(shards: list[Mapping[str, Tensor]]) -> dict[str, bytes]:
    """Shard files plus model.safetensors.index.json (weight_map and total size), as HF checkpoints ship them."""
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    total = 0
    for index, shard in enumerate(shards):
        name = f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors"
        files[name] = safetensors_bytes(shard)
        weight_map.update({tensor_name: name for tensor_name in shard})
        total += sum(len(item.data) for item in shard.values())
    index_doc = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    files[INDEX_FILE] = json_bytes(index_doc)
    return files
