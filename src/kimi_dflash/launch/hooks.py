"""Adapters from the launcher to preflight and the patcher (each owned by its own package): both take what
`prepare` made (launch/prepare.py), its verdict included, so a start judges its plan once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kimi_dflash.launch.prepare import Prepared

# The architectures the recipe was built and measured on.
EXPECTED_ARCH = {"rocm": "gfx942", "cuda": "sm_90"}


def preflight(prepared: Prepared, fix_numa: bool, say: Callable[[str], None], starting: bool = False) -> bool:
    """`starting`: vLLM starts next and imports vllm itself, first thing: the probe imports only torch, on a GPU."""
    from kimi_dflash.core.checks import exit_code, render
    from kimi_dflash.preflight.request import PreflightRequest
    from kimi_dflash.preflight.run import run_preflight
    from kimi_dflash.preflight.runtime_probe import interpreter_for_command

    typed, plan = prepared.config.typed, prepared.plan
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
        deployment=prepared.deployment,
        verdict=prepared.verdict,
        python=interpreter_for_command(plan.argv),
        fix_numa=fix_numa,
        preshard_dir=typed.preshard_dir,
        dtype=typed.dtype,
        imports=("torch",) * (typed.device != "cpu") if starting else ("vllm", "torch"),
    )
    results = run_preflight(request)
    say(render(results))
    return exit_code(results) == 0


def patches(prepared: Prepared, say: Callable[[str], None], vllm_root: Path | None = None) -> bool:
    """Report the patch status of the vLLM that will run; on ROCm write the pending file patches the verdict's
    remedies name (judged again when the tree is not the verdict's). At or above the patch floor (patcher/floor.py)
    the patcher is not loaded."""
    from kimi_dflash.patcher import floor

    on_rocm = prepared.deployment.platform == "rocm"
    judged = prepared.verdict and Path(prepared.verdict.vllm_origin)  # the serving Python's vLLM
    root = floor.package_dir(vllm_root or judged)
    if root is not None and floor.package_at_floor(root):
        say(f"patches: vLLM at {root} is {floor.describe()}: nothing to check or write")
        return True
    from kimi_dflash.patcher.engine import EXIT_UNRECOGNISED, apply_pending, status_table
    from kimi_dflash.patcher.model import PatcherError, Status
    from kimi_dflash.rules.engine import judge
    from kimi_dflash.rules.source import VllmSource

    try:
        table = status_table(root)
        say(table.to_text())
        if not on_rocm:
            return True
        if table.exit_code == EXIT_UNRECOGNISED:
            say("patches: this vLLM tree is not one the patcher recognises; refusing to start on ROCm")
            return False
        pending = {s.patch.id for s in table.states if s.status is Status.PENDING}
        verdict = prepared.verdict
        if verdict is None or verdict.vllm_origin != str(table.root):
            verdict = judge(prepared.deployment, VllmSource.open(table.root))
        needed = [r.name for r in verdict.remedies("file patch") if r.name in pending]
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
