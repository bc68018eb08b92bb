"""Adapters from the launcher to preflight, the compatibility rules and the patcher (each owned by its own package).
One serve builds the plan's Deployment once (`deployment`) and hands it to every step; the rules judge it once per
vLLM tree (rules/engine.py), and the patch step reuses preflight's verdict."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kimi_dflash.config.validate import Config
from kimi_dflash.plan import LaunchPlan

if TYPE_CHECKING:
    from kimi_dflash.checkpoint import Facts
    from kimi_dflash.rules.deployment import Deployment, Env

# The architectures the recipe was built and measured on.
EXPECTED_ARCH = {"rocm": "gfx942", "cuda": "sm_90"}


def deployment(config: Config, plan: LaunchPlan, inherited_env: Env = None, facts: Facts | None = None) -> Deployment:
    from kimi_dflash.rules.deployment import Deployment

    return Deployment.for_plan(config, plan, inherited_env, facts)


def preflight(
    config: Config, plan: LaunchPlan, fix_numa: bool, say: Callable[[str], None], planned: Deployment | None = None
) -> bool:
    """`planned`: the deployment this serve built (default: built here from the plan and this environment)."""
    from kimi_dflash.core.checks import exit_code, render
    from kimi_dflash.preflight.request import PreflightRequest
    from kimi_dflash.preflight.run import run_preflight
    from kimi_dflash.preflight.runtime_probe import interpreter_for_command

    typed = config.typed
    planned = planned or deployment(config, plan, os.environ)
    request = PreflightRequest(
        device=typed.device,  # type: ignore[arg-type]
        tensor_parallel_size=typed.tensor_parallel_size if typed.device != "cpu" else 1,
        expected_arch=EXPECTED_ARCH.get(typed.device),
        model_dir=typed.model_dir,
        draft_model_dir=typed.draft_model_dir if typed.speculative else None,
        model_repo_hint=str(typed.model_repo),
        draft_repo_hint=str(typed.draft_model_repo),
        host=plan.host,
        port=plan.port,
        deployment=planned,
        python=interpreter_for_command(plan.argv),
        fix_numa=fix_numa,
        preshard_dir=typed.preshard_dir,
        dtype=typed.dtype,
    )
    results = run_preflight(request)
    say(render(results))
    return exit_code(results) == 0 and _kv_scales_ok(config, plan, planned, say)


def _kv_scales_ok(config: Config, plan: LaunchPlan, planned: Deployment, say: Callable[[str], None]) -> bool:
    """A wrong KV-scales setup fails here in milliseconds instead of after a 555 GB model load."""
    if config.typed.kv_scale_mode == "off":
        return True
    from kimi_dflash.kvscale.checks import check_kv_scale_config

    v, fp = config.typed, None if planned.target is None else planned.target.fingerprint  # the target's facts
    findings = check_kv_scale_config(plan.env, model=str(v.model_dir), kv_cache_dtype=v.kv_cache_dtype, fingerprint=fp)
    for finding in findings:
        say(f"[{finding.level.upper()}] kv scales       {finding.message}")
    return all(finding.level != "fail" for finding in findings)


def patches(planned: Deployment, say: Callable[[str], None], vllm_root: Path | None = None) -> bool:
    """Report the patch status of the vLLM that will run; on ROCm write a pending file patch the rules' verdict
    relies on. At or above the patch floor (patcher/floor.py) the patcher is not loaded."""
    from kimi_dflash.patcher import floor

    on_rocm = planned.platform == "rocm"
    root = floor.package_dir(vllm_root)
    if root is not None and floor.package_at_floor(root):
        say(f"patches: vLLM at {root} is {floor.describe()}: nothing to check or write")
        return True
    from kimi_dflash.patcher.engine import EXIT_UNRECOGNISED, apply_pending, status_table
    from kimi_dflash.patcher.model import PatcherError, Status
    from kimi_dflash.rules.engine import judge
    from kimi_dflash.rules.source import VllmSource, forget

    try:
        table = status_table(root)
        say(table.to_text())
        if not on_rocm:
            return True
        if table.exit_code == EXIT_UNRECOGNISED:
            say("patches: this vLLM tree is not one the patcher recognises; refusing to start on ROCm")
            return False
        pending = {s.patch.id for s in table.states if s.status is Status.PENDING}
        needed = [p for p in judge(planned, VllmSource.open(table.root)).file_patches if p in pending]
        if needed:
            say(f"patches: writing the file patch(es) this plan needs: {', '.join(needed)}")
            say(apply_pending(table.root, only=needed).after.to_text())
            forget(table.root)  # the tree changed: the next reader reads it again
        elif table.exit_code == 1:
            say(
                "patches: nothing to write for this plan (pending patches are not needed, or the plugin "
                "installs them at runtime)"
            )
    except PatcherError as exc:
        say(f"patches: {exc}")
        return not on_rocm
    return True
