"""Adapters from the launcher to the preflight checks, the compatibility check and the patcher (each owned by
its own package)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kimi_dflash.config.validate import Config
from kimi_dflash.plan import LaunchPlan

if TYPE_CHECKING:
    from kimi_dflash.preflight.deployment import Deployment

# The architectures the recipe was built and measured on.
EXPECTED_ARCH = {"rocm": "gfx942", "cuda": "sm_90"}


def deployment(config: Config, plan: LaunchPlan, inherited_env: Mapping[str, str] | None = None) -> Deployment:
    """The plan as the compatibility rules see it (preflight/plan_deployment.py)."""
    from kimi_dflash.preflight.plan_deployment import deployment_for_plan

    return deployment_for_plan(config, plan, inherited_env)


def preflight(config: Config, plan: LaunchPlan, fix_numa: bool, say: Callable[[str], None]) -> bool:
    from kimi_dflash.preflight import PreflightRequest, exit_code, interpreter_for_command, render, run_preflight

    device = config.typed.device
    model_dir = config.typed.model_dir
    draft_dir = config.typed.draft_model_dir if config.speculative else None
    request = PreflightRequest(
        device=device,  # type: ignore[arg-type]
        tensor_parallel_size=config.typed.tensor_parallel_size if device != "cpu" else 1,
        expected_arch=EXPECTED_ARCH.get(device),
        model_dir=None if model_dir is None else Path(str(model_dir)),
        draft_model_dir=None if draft_dir is None else Path(str(draft_dir)),
        model_repo_hint=str(config.typed.model_repo),
        draft_repo_hint=str(config.typed.draft_model_repo),
        host=plan.host,
        port=plan.port,
        deployment=deployment(config, plan, os.environ),
        python=interpreter_for_command(plan.argv),
        fix_numa=fix_numa,
        preshard_dir=None if config.typed.preshard_dir is None else Path(str(config.typed.preshard_dir)),
        dtype=config.typed.dtype,
    )
    results = run_preflight(request)
    say(render(results))
    return exit_code(results) == 0 and _kv_scales_ok(config, plan, say)


def _kv_scales_ok(config: Config, plan: LaunchPlan, say: Callable[[str], None]) -> bool:
    """A wrong KV-scales setup fails here in milliseconds instead of after a 555 GB model load."""
    if config.typed.kv_scale_mode == "off":
        return True
    from kimi_dflash.kvscale.checks import check_kv_scale_config

    model_dir = config.typed.model_dir
    findings = check_kv_scale_config(
        plan.env,
        model=str(model_dir),
        kv_cache_dtype=config.typed.kv_cache_dtype,
        model_dir=None if model_dir is None else Path(str(model_dir)),
    )
    for finding in findings:
        say(f"[{finding.level.upper()}] kv scales       {finding.message}")
    return all(finding.level != "fail" for finding in findings)


def patches(config: Config, plan: LaunchPlan, say: Callable[[str], None], vllm_root: Path | None = None) -> bool:
    """Report the patch status of the vLLM that will run; on ROCm write the file patches this plan needs.

    A pending patch is written into the vLLM tree only when its needed_when holds for this plan and the plugin
    cannot deliver it at runtime (triton-noncausal is file-only). Patches the plan does not need are left
    alone, so a read-only tree with nothing needed is fine. Off ROCm the patches are only reported.
    """
    from kimi_dflash.patcher.engine import EXIT_UNRECOGNISED, apply_pending, file_patches_needed, status_table
    from kimi_dflash.patcher.model import PatcherError

    on_rocm = config.typed.device == "rocm"
    try:
        table = status_table(vllm_root)
        say(table.to_text())
        if not on_rocm:
            return True
        if table.exit_code == EXIT_UNRECOGNISED:
            say("patches: this vLLM tree is not one the patcher recognises; refusing to start on ROCm")
            return False
        needed = file_patches_needed(table, deployment(config, plan, os.environ))
        if needed:
            say(f"patches: writing the file patch(es) this plan needs: {', '.join(needed)}")
            say(apply_pending(table.root, only=needed).after.to_text())
        elif table.exit_code == 1:
            say(
                "patches: nothing to write for this plan (pending patches are not needed, or the plugin "
                "installs them at runtime)"
            )
    except PatcherError as exc:
        say(f"patches: {exc}")
        return not on_rocm
    return True
