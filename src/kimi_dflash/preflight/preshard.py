"""Preflight: a pre-sharded checkpoint (PRESHARD_DIR) must fit the plan exactly, or vLLM would load wrong slices."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimi_dflash.core.checks import CheckResult, failed, passed
from kimi_dflash.preflight.manifest import ManifestError, mismatches, read_manifest

if TYPE_CHECKING:
    from kimi_dflash.preflight.request import PreflightRequest
    from kimi_dflash.preflight.runtime_probe import RuntimeReport

NAME = "pre-shard"


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
        return failed(NAME, str(error), fix)
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
        return failed(NAME, f"{directory}: " + "; ".join(problems), fix)
    return passed(
        NAME,
        f"{directory}: TP {manifest.tensor_parallel_size}, vLLM {manifest.vllm_version}, "
        f"{manifest.dtype}, {len(manifest.files)} shard files, made from this MODEL_DIR",
    )
