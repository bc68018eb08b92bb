"""The checkpoints: is a model or drafter directory complete enough to load, and does a pre-sharded checkpoint fit
the plan exactly (else vLLM loads wrong slices)? A 555 GB download stopped half way, or a `git clone` without
git-lfs (130-byte pointer files), otherwise surfaces minutes into the load as an obscure safetensors error."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from kimi_dflash.checkpoint import CONFIG_FILE, Facts, read_checkpoint
from kimi_dflash.core.checks import CheckResult, failed, passed
from kimi_dflash.preflight.manifest import ManifestError, mismatches, read_manifest

if TYPE_CHECKING:
    from kimi_dflash.preflight.request import PreflightRequest
    from kimi_dflash.preflight.runtime_probe import RuntimeReport

INDEX_FILE = "model.safetensors.index.json"
MAX_LISTED = 3  # name a few missing shards; the count says how many more
_LFS_POINTER_PREFIX = b"version https://git-lfs"
_LFS_POINTER_MAX_BYTES = 1024


def check_model_dir(
    path: Path, role: str, repo_hint: str | None = None, *, fix_hint: str | None = None, facts: Facts | None = None
) -> CheckResult:
    """``repo_hint``: the Hugging Face repo of the download fix, which ``fix_hint`` replaces (fabricated demo models);
    ``facts``: the start's checkpoint facts, whose reading of config.json this reports (None: read here)."""
    name = f"{role} dir"
    path = Path(path)
    fix = fix_hint or f"download the {role} checkpoint (config.json + *.safetensors) into {path}"
    if repo_hint and not fix_hint:  # re-running the download resumes: complete files are skipped
        fix = f"hf download {shlex.quote(repo_hint)} --local-dir {shlex.quote(str(path))}"
    if not path.exists():
        return failed(f"{path} does not exist", fix, name=name)
    if not path.is_dir():
        return failed(f"{path} is not a directory", f"point the config at the {role} checkpoint directory", name=name)
    if not (path / CONFIG_FILE).is_file():
        return failed(f"{path}: {CONFIG_FILE} missing", fix, name=name)
    problem = read_checkpoint(path, None, role)[1] if facts is None else facts.problems.get(path)
    if problem:
        return failed(problem, fix, name=name)
    index = path / INDEX_FILE
    if index.exists():
        shards, problem = _indexed_shards(index)
        if problem:
            return failed(f"{path}: {problem}", fix, name=name)
    else:
        shards = sorted(p.name for p in path.glob("*.safetensors"))
        if not shards:
            return failed(f"{path}: no {INDEX_FILE} and no *.safetensors weights", fix, name=name)
    missing, empty, pointers, total_bytes = _inspect_shards(path, shards)
    found = (("missing", missing), ("empty", empty), ("are git-lfs pointer files, not weights", pointers))
    bad = [(label, files) for label, files in found if files]
    if bad:
        detail = "; ".join(f"{len(files)} of {len(shards)} shards {label}: {_listing(files)}" for label, files in bad)
        if pointers:
            fix = f"{fix}\nor, in a git clone: git lfs install && git -C {shlex.quote(str(path))} lfs pull"
        return failed(f"{path}: {detail}", fix, name=name)
    return passed(
        f"{path}: config.json + {len(shards)} shard{'s' if len(shards) != 1 else ''}, {_size(total_bytes)}", name=name
    )


def _indexed_shards(index: Path) -> tuple[list[str], str | None]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return [], f"{index.name} is not valid JSON ({error})"
    except OSError as error:
        return [], f"{index.name} cannot be read ({error.strerror or error})"
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        return [], f"{INDEX_FILE} has no weight_map"
    return sorted({str(shard) for shard in weight_map.values()}), None


def _inspect_shards(directory: Path, shards: list[str]) -> tuple[list[str], list[str], list[str], int]:
    missing, empty, pointers, total = [], [], [], 0
    for shard in shards:
        try:
            size = (directory / shard).stat().st_size  # follows HF-cache symlinks; a dangling one is missing
        except OSError:
            missing.append(shard)
            continue
        if size == 0:
            empty.append(shard)
        elif size < _LFS_POINTER_MAX_BYTES and _is_lfs_pointer(directory / shard):
            pointers.append(shard)
        total += size
    return missing, empty, pointers, total


def _is_lfs_pointer(file: Path) -> bool:
    try:
        with file.open("rb") as handle:
            return handle.read(len(_LFS_POINTER_PREFIX)) == _LFS_POINTER_PREFIX
    except OSError:
        return False


def _listing(files: list[str]) -> str:
    shown = ", ".join(files[:MAX_LISTED])
    return shown if len(files) <= MAX_LISTED else f"{shown} (+{len(files) - MAX_LISTED} more)"


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def check_preshard(request: PreflightRequest, runtime: RuntimeReport | None) -> CheckResult:
    directory = request.preshard_dir
    assert directory is not None  # run_preflight adds this check only with a pre-shard
    fix = (
        f"re-run kimi-dflash preshard CONFIG --output {directory} --force with the vLLM and config that "
        "serve, or unset PRESHARD_DIR to load MODEL_DIR directly"
    )
    try:
        manifest = read_manifest(directory)
    except ManifestError as error:
        return failed(str(error), fix)
    problems = mismatches(
        manifest,
        directory,
        source_dir=request.model_dir,
        tensor_parallel_size=request.tensor_parallel_size,
        vllm_version=None if runtime is None else runtime.vllm_version,
        dtype=request.dtype,
    )
    if runtime is None or runtime.vllm_version is None:
        problems.append("the vLLM version could not be read, so the pre-shard cannot be matched to it")
    if problems:
        return failed(f"{directory}: " + "; ".join(problems), fix)
    return passed(
        f"{directory}: TP {manifest.tensor_parallel_size}, vLLM {manifest.vllm_version}, "
        f"{manifest.dtype}, {len(manifest.files)} shard files, made from this MODEL_DIR"
    )
