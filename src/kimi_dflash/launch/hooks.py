"""Adapters from the launcher to the preflight checks and the patcher (each owned by its own package)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kimi_dflash.config.validate import Config
from kimi_dflash.plan import LaunchPlan

# The architectures the recipe was built and measured on.
EXPECTED_ARCH = {"rocm": "gfx942", "cuda": "sm_90"}


def preflight(config: Config, plan: LaunchPlan, fix_numa: bool, say: Callable[[str], None]) -> bool:
    from kimi_dflash.preflight import (
        PreflightRequest, exit_code, features_from_command, interpreter_for_command, render, run_preflight,
    )

    device = str(config["DEVICE"])
    model_dir = config["MODEL_DIR"]
    draft_dir = config["DRAFT_MODEL_DIR"] if config.speculative else None
    request = PreflightRequest(
        device=device,  # type: ignore[arg-type]
        tensor_parallel_size=config.get_int("TENSOR_PARALLEL_SIZE") if device != "cpu" else 1,
        expected_arch=EXPECTED_ARCH.get(device),
        model_dir=None if model_dir is None else Path(str(model_dir)),
        draft_model_dir=None if draft_dir is None else Path(str(draft_dir)),
        model_repo_hint=str(config["MODEL_REPO"]),
        draft_repo_hint=str(config["DRAFT_MODEL_REPO"]),
        host=plan.host,
        port=plan.port,
        required_features=features_from_command(plan.argv, plan.env),
        python=interpreter_for_command(plan.argv),
        fix_numa=fix_numa,
    )
    results = run_preflight(request)
    say(render(results))
    return exit_code(results) == 0 and _kv_scales_ok(config, plan, say)


def _kv_scales_ok(config: Config, plan: LaunchPlan, say: Callable[[str], None]) -> bool:
    """A wrong KV-scales setup fails here in milliseconds instead of after a 555 GB model load."""
    if config["KV_SCALE_MODE"] == "off":
        return True
    from kimi_dflash.kvscale.checks import check_kv_scale_config

    model_dir = config["MODEL_DIR"]
    findings = check_kv_scale_config(plan.env, model=str(model_dir), kv_cache_dtype=str(config["KV_CACHE_DTYPE"]),
                                     model_dir=None if model_dir is None else Path(str(model_dir)))
    for finding in findings:
        say(f"[{finding.level.upper()}] kv scales       {finding.message}")
    return all(finding.level != "fail" for finding in findings)


def patches(config: Config, say: Callable[[str], None]) -> bool:
    """Report the patch status of the vLLM that will run; on ROCm apply pending file patches first.

    Off ROCm the patches do not apply (they fix ROCm attention paths), so problems there only warn.
    """
    from kimi_dflash.patcher.engine import apply_pending, status_table
    from kimi_dflash.patcher.model import PatcherError

    on_rocm = config["DEVICE"] == "rocm"
    try:
        table = status_table()
        if on_rocm and table.exit_code == 1:
            say("patches: applying pending vLLM patches")
            table = apply_pending().after
    except PatcherError as exc:
        say(f"patches: {exc}")
        return not on_rocm
    say(table.to_text())
    return table.exit_code == 0 or not on_rocm
