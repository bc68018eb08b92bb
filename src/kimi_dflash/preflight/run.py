"""Run every preflight check for one request, in the order a person would fix them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from kimi_dflash.core.checks import CheckResult, failed
from kimi_dflash.preflight.accelerators import check_accelerators
from kimi_dflash.preflight.host import HostProbe
from kimi_dflash.preflight.model_dir import check_model_dir, check_preshard
from kimi_dflash.preflight.request import PreflightRequest
from kimi_dflash.preflight.system import check_numa, check_port, check_shm
from kimi_dflash.preflight.vllm_check import check_vllm

Check = Callable[[], "list[CheckResult] | CheckResult"]


def run_preflight(request: PreflightRequest, probe: HostProbe | None = None) -> list[CheckResult]:
    """Never raises: every finding is a result line. The runtime probe (a child importing vLLM) runs once."""
    probe = probe or HostProbe()
    try:
        runtime = probe.runtime(request)
        vllm: Check = partial(check_vllm, request, runtime)
    except Exception as error:  # noqa: BLE001 - reported as the vllm line; the other checks still run
        runtime, vllm = None, partial(_crashed, "vllm", error)
    checks: list[tuple[str, Check]] = [
        ("vllm", vllm),
        ("accelerators", partial(check_accelerators, request, probe, runtime)),
        ("numa balancing", partial(check_numa, request, probe)),
        ("/dev/shm", partial(check_shm, request, probe)),
    ]
    for role, directory, repo, fix in (
        ("model", request.model_dir, request.model_repo_hint, request.model_fix_hint),
        ("drafter", request.draft_model_dir, request.draft_repo_hint, request.draft_fix_hint),
    ):
        if directory is not None:
            facts = None if request.deployment is None else request.deployment.facts
            checks.append((f"{role} dir", partial(check_model_dir, directory, role, repo, fix_hint=fix, facts=facts)))
    if request.preshard_dir is not None:
        checks.append(("pre-shard", partial(check_preshard, request, runtime)))
    if request.deployment is not None and request.deployment.kv_scale_mode != "off":  # not after a 555 GB load
        checks.append(("kv scales", partial(_kv_scales, request)))
    checks.append(("port", partial(check_port, request, probe)))

    results: list[CheckResult] = []
    for name, check in checks:
        try:
            outcome = check()
        except Exception as error:  # noqa: BLE001 - one broken check must not hide the others
            outcome = _crashed(name, error)
        # A result is named by its check unless it names itself (accelerators: also the arch and torch lines).
        named = outcome if isinstance(outcome, list) else [outcome]
        results += [r if r.name else replace(r, name=name) for r in named]
    return results


def _kv_scales(request: PreflightRequest) -> list[CheckResult]:
    from kimi_dflash.kvscale.checks import check_kv_scale_config

    planned = request.deployment
    assert planned is not None  # the check is added only with a deployment
    model, target = str(request.model_dir or planned.command.model), planned.target  # matched on the target's facts
    return check_kv_scale_config(
        planned.env, model=model, kv_cache_dtype=planned.kv_cache_dtype, fingerprint=target and target.fingerprint
    )


def _crashed(name: str, error: BaseException) -> CheckResult:
    fix = "this is a bug in kimi_dflash.preflight: report this line; --skip-preflight starts without checks"
    return failed(f"the check itself crashed: {type(error).__name__}: {error}", fix, name=name)
