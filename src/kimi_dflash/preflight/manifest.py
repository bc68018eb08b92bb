"""The pre-shard manifest: what a pre-sharded checkpoint was made from, and the check that it still fits. Written
last (the directory is staged beside and renamed into place), so a directory without one is never a usable pre-shard."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

from kimi_dflash.core.atomic_write import write_text_atomic

MANIFEST_NAME = "kimi-dflash-preshard.json"
FORMAT = "sharded_state"
SCHEMA_VERSION = 1
# vLLM's default file name for TP-only sharded state (ShardedStateLoader.TP_ONLY_PATTERN, vLLM 0.5 .. 0.32).
RANK_FILE_GLOB = "model-rank-{rank}-part-*.safetensors"
# Read in full by the fingerprint; weights give their safetensors header and size (kilobytes of a 555 GB checkpoint).
_SMALL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "model.safetensors.index.json",
)


@dataclass(frozen=True)
class Manifest:
    source_dir: str
    source_fingerprint: str
    tensor_parallel_size: int
    vllm_distribution: str
    vllm_version: str
    dtype: str
    files: dict[str, int]  # shard file name -> size in bytes
    format: str = FORMAT
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


class ManifestError(ValueError):
    """The directory is not a finished pre-shard, or its manifest is unreadable."""


def checkpoint_fingerprint(checkpoint: Path) -> str:
    """sha256 over the small metadata files and each safetensors file's size and header: another, re-quantised or
    re-configured checkpoint shows; a same-shape bit flip does not (hashing 555 GB at every start would)."""
    digest = hashlib.sha256()
    for name in _SMALL_FILES:
        path = checkpoint / name
        if path.is_file():
            digest.update(f"file {name}\n".encode())
            digest.update(path.read_bytes())
    weights = sorted(checkpoint.glob("*.safetensors"))
    if not weights:
        raise ManifestError(f"{checkpoint}: no *.safetensors files: not a checkpoint directory")
    for path in weights:
        digest.update(f"weights {path.name} {path.stat().st_size}\n".encode())
        digest.update(_safetensors_header(path))
    return digest.hexdigest()


def _safetensors_header(path: Path) -> bytes:
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > 100 * 1024 * 1024:
            raise ManifestError(f"{path}: safetensors header of {length} bytes: not a safetensors file")
        return handle.read(length)


def rank_files(directory: Path, rank: int) -> list[Path]:
    return sorted(directory.glob(RANK_FILE_GLOB.format(rank=rank)))


def write_manifest(directory: Path, manifest: Manifest) -> None:
    write_text_atomic(directory / MANIFEST_NAME, manifest.to_json())


def read_manifest(directory: Path) -> Manifest:
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(
            f"{directory} has no {MANIFEST_NAME}: not a finished pre-shard (an interrupted run "
            f"leaves only a *.partial directory); run kimi-dflash preshard CONFIG --output {directory}"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Manifest(**data)
    except (json.JSONDecodeError, TypeError) as error:
        raise ManifestError(
            f"{path}: unreadable manifest ({error}); re-run kimi-dflash preshard CONFIG --output {directory} --force"
        ) from error


def mismatches(
    manifest: Manifest,
    directory: Path,
    *,
    source_dir: Path | None,
    tensor_parallel_size: int,
    vllm_version: str | None,
    dtype: str | None = None,
) -> list[str]:
    """Why this pre-shard must not serve this plan (empty: it fits)."""
    problems: list[str] = []
    if manifest.format != FORMAT or manifest.schema_version != SCHEMA_VERSION:
        problems.append(
            f"format {manifest.format} v{manifest.schema_version}, this project writes {FORMAT} v{SCHEMA_VERSION}"
        )
    if manifest.tensor_parallel_size != tensor_parallel_size:
        problems.append(f"made for TP {manifest.tensor_parallel_size}, the plan serves TP {tensor_parallel_size}")
    if vllm_version is not None and manifest.vllm_version != vllm_version:
        problems.append(
            f"made with vLLM {manifest.vllm_version}, this vLLM is {vllm_version} (the saved state is "
            "the model's in-memory layout, which changes between releases)"
        )
    if dtype is not None and dtype != "auto" and manifest.dtype != dtype:
        problems.append(f"saved in {manifest.dtype}, the plan serves DTYPE={dtype}")
    for name, size in manifest.files.items():
        path = directory / name
        if not path.is_file() or path.stat().st_size != size:
            problems.append(f"shard {name} is missing or has changed size")
    if source_dir is not None:
        try:
            fingerprint = checkpoint_fingerprint(source_dir)
        except (ManifestError, OSError) as error:
            problems.append(f"cannot fingerprint MODEL_DIR: {error}")
        else:
            if fingerprint != manifest.source_fingerprint:
                problems.append(
                    f"made from another checkpoint ({manifest.source_dir}, fingerprint "
                    f"{manifest.source_fingerprint[:12]}), MODEL_DIR {source_dir} is {fingerprint[:12]}"
                )
    return problems
