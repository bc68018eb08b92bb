"""Run every preflight check for one request, in the order a person would fix them."""

from __future__ import annotations

from collections.abc import Callable

from kimi_dflash.core.checks import CheckResult, failed
from kimi_dflash.preflight.accelerators import check_accelerators
from kimi_dflash.preflight.host import HostProbe
from kimi_dflash.preflight.model_dir import check_model_dir
from kimi_dflash.preflight.numa import check_numa
from kimi_dflash.preflight.port import check_port
from kimi_dflash.preflight.preshard import check_preshard
from kimi_dflash.preflight.request import PreflightRequest
from kimi_dflash.preflight.runtime_probe import RuntimeReport
from kimi_dflash.preflight.shm import check_shm
from kimi_dflash.preflight.vllm_check import check_vllm

Check = Callable[[], "list[CheckResult] | CheckResult"]


def run_preflight(request: PreflightRequest, probe: HostProbe | None = None) -> list[CheckResult]:
    """All checks: vLLM (+ features), accelerators (+ arch, torch), NUMA, /dev/shm, checkpoints, port.

    Never raises for what it finds on the host: every finding is a result line. The runtime probe (one child
    process importing vLLM) runs once and feeds both the vLLM and the accelerator checks.
    """
    probe = probe or HostProbe()
    runtime, vllm_check = _runtime(request, probe)
    checks: list[tuple[str, Check]] = [
        ("vllm", vllm_check),
        ("accelerators", lambda: check_accelerators(request, probe, runtime)),
        ("numa balancing", lambda: check_numa(request, probe)),
        ("/dev/shm", lambda: check_shm(request, probe)),
    ]
    if request.model_dir is not None:
        model_dir = request.model_dir
        checks.append(
            (
                "model dir",
                lambda: check_model_dir(model_dir, "model", request.model_repo_hint, fix_hint=request.model_fix_hint),
            )
        )
    if request.draft_model_dir is not None:
        draft_dir = request.draft_model_dir
        checks.append(
            (
                "drafter dir",
                lambda: check_model_dir(draft_dir, "drafter", request.draft_repo_hint, fix_hint=request.draft_fix_hint),
            )
        )
    if request.preshard_dir is not None:
        checks.append(("pre-shard", lambda: check_preshard(request, runtime)))
    checks.append(("port", lambda: check_port(request, probe)))

    results: list[CheckResult] = []
    for name, check in checks:
        try:
            outcome = check()
        except Exception as error:  # noqa: BLE001 - one broken check must not hide the others
            outcome = _crashed(name, error)
        results.extend(outcome if isinstance(outcome, list) else [outcome])
    return results


def _runtime(request: PreflightRequest, probe: HostProbe) -> tuple[RuntimeReport | None, Check]:
    try:
        report = probe.runtime(request.required_features, request.interpreter, request.vllm_env)
    except Exception as error:  # noqa: BLE001 - reported as the vllm line; the other checks still run
        crash = _crashed("vllm", error)
        return None, lambda: crash
    return report, lambda: check_vllm(request, report)


def _crashed(name: str, error: BaseException) -> CheckResult:
    return failed(
        name,
        f"the check itself crashed: {type(error).__name__}: {error}",
        "this is a bug in kimi_dflash.preflight: report this line; --skip-preflight starts without checks",
    )
