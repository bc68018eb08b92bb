"""The recipe's vLLM patches: those this plan needs must be applied, retired upstream or deliverable (by the plugin
at runtime, or as a file patch serve writes on ROCm). At or above the patch floor (patcher/floor.py) every fix is
upstream and the patch machinery is never loaded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimi_dflash.core.checks import CheckResult, Remedy, failed, passed
from kimi_dflash.patcher import floor
from kimi_dflash.rules import backends
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Findings, Rule, label
from kimi_dflash.rules.source import VllmSource

if TYPE_CHECKING:
    from kimi_dflash.patcher.model import Need, Patch

PLUGIN = "the kimi_dflash vLLM plugin"


def drafter_backend(deployment: Deployment, source: VllmSource) -> str | None:
    """The attention backend the DFlash drafter runs on: speculative_config.attention_backend when set, else the
    platform's first non-causal-capable backend (ROCm: ROCM_ATTN in every release 0.20-0.33)."""
    return deployment.drafter_attention_backend or backends.default_drafter_backend(source, deployment.platform)


def condition(name: str, deployment: Deployment, source: VllmSource) -> bool | None:
    """One word of a patch's `needed_when` (patcher/model.py's Need): True, False, or None when the facts it needs
    are unknown (no checkpoint facts, a selector the source reader does not recognise)."""
    if name == "dflash":
        return deployment.dflash
    if name == "mla target":
        return None if deployment.target is None else deployment.target.mla
    if name == "sliding-window drafter":
        return None if deployment.drafter is None else deployment.drafter.sliding_window
    backend = drafter_backend(deployment, source) if name.startswith("drafter ") else None
    if name == "drafter metadata without causal":
        has_field = None if backend is None else backends.backend_metadata_has_causal(source, backend)
        return None if has_field is None else not has_field
    if name.startswith("drafter on "):
        return None if backend is None else backend == name.removeprefix("drafter on ")
    raise ValueError(f"unknown patch condition {name!r}")


def needed(need: Need | None, deployment: Deployment, source: VllmSource) -> bool | None:
    """Whether the plan takes the path a patch fixes: False as soon as one condition is false, None when one is
    unknown (callers treat that as "may be needed"), True otherwise; no condition: always, where pending."""
    unknown = False
    for name in () if need is None else need.conditions:
        value = condition(name, deployment, source)
        if value is False:
            return False
        unknown = unknown or value is None
    return None if unknown else True


def _hooks_present(patch: Patch, source: VllmSource) -> bool:
    texts = [(probe, source.text(f"vllm/{probe.path}")) for probe in patch.runtime_hooks]
    return all(text is not None and probe.matches(text) for probe, text in texts)


def _check_patches(deployment: Deployment, source: VllmSource) -> Findings:
    if floor.holds(source.text(f"vllm/{floor.PATH}")):
        return passed(f"{label(source)} is {floor.describe()}: every fix a patch stood in for is upstream")
    from kimi_dflash.patcher.model import Status
    from kimi_dflash.patcher.registry import PATCHES, source_paths
    from kimi_dflash.patcher.status import evaluate_all

    findings: list[CheckResult] = []
    done, unneeded = [], []
    for state in evaluate_all(PATCHES, {path: source.text(f"vllm/{path}") for path in source_paths()}):
        patch = state.patch
        if state.status in (Status.RETIRED, Status.APPLIED):
            done.append(f"{patch.id} ({state.status.value})")
            continue
        if state.status is Status.UNRECOGNISED:
            refused = f"{patch.id}: {state.detail} - the plugin refuses to start vLLM on a tree it does not recognise"
            fix = f"use vLLM >= {floor.OLDEST}, or KIMI_DFLASH_PATCHES=off to start without the patches"
            findings.append(failed(refused, fix, f"unrecognised {patch.id}"))
            continue
        need = needed(patch.needed_when, deployment, source)
        if need is False:
            unneeded.append(f"{patch.id} - needed when {patch.needed_when}")
            continue
        why = f"needed: {patch.needed_when}" if need else f"may be needed (facts unknown): {patch.needed_when}"
        if patch.runtime and _hooks_present(patch, source):
            runtime = f"{patch.id} pending in {label(source)}, {why}; {PLUGIN} installs it at runtime"
            findings.append(passed(runtime, relies=(Remedy("plugin", f"runtime patch {patch.id}"),)))
        elif patch.edits:
            file_only = f"{patch.id} pending, {why}; only a file patch fixes it (serve.sh writes it on ROCm"
            findings.append(passed(f"{file_only}; the vLLM tree must be writable)", (Remedy("file patch", patch.id),)))
        else:
            lacks = f"{patch.id} {why}, and this vLLM lacks the upstream fix (PR {patch.upstream_pr})"
            findings.append(failed(lacks, f"use vLLM >= {patch.upstream_since}", f"patch {patch.id}"))
    summary = [f"nothing to do for {', '.join(done)}"] if done else []
    if unneeded:
        summary.append("pending in this vLLM but not needed by this plan:\n" + "\n".join(f"  {u}" for u in unneeded))
    return [passed("; ".join(summary)), *findings] if summary else findings


RULES = (
    Rule(
        "patches",
        "the DFlash + MLA patches this plan needs are applied, retired or deliverable",
        "Pending patches whose needed_when holds for this plan must be delivered (plugin or file).",
        "the patch floor's probe (src/kimi_dflash/patcher/floor.py); below it, the patch registry's probes and "
        "anchors (src/kimi_dflash/patcher/registry.py)",
        "install the plugin (pip install -e .), or use a vLLM with the upstream fixes",
        _check_patches,
    ),
)
