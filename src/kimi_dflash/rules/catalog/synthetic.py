"""vLLM's synthetic acceptance sampler (a benchmark aid, 0.32+) on the CPU build: accepted at start-up, and the first
request kills the engine."""

from __future__ import annotations

from kimi_dflash.core.checks import failed, passed, warned
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Fact, Findings, Rule, label
from kimi_dflash.rules.source import SourceLine, VllmSource

CPU_TRITON_UTILS = "vllm/utils/cpu_triton_utils.py"
SYNTHETIC_CPU_MESSAGE = "Synthetic acceptance not supported with CPU sampling"


def synthetic_cpu_refusal(source: VllmSource) -> SourceLine | None:
    """Where the CPU build's sampler raises for synthetic acceptance (vllm/utils/cpu_triton_utils.py)."""
    return source.line_of(CPU_TRITON_UTILS, SYNTHETIC_CPU_MESSAGE)


def _check_synthetic(deployment: Deployment, source: VllmSource) -> Findings:
    if deployment.speculative.get("rejection_sample_method") != "synthetic":
        return []
    if deployment.platform != "cpu":
        return passed("synthetic acceptance on a GPU platform (a benchmark aid: outputs are not the model's)")
    where = synthetic_cpu_refusal(source)
    if where is None:
        return warned(f"synthetic acceptance on CPU: cannot verify, no CPU sampler refusal in {label(source)}")
    return failed(
        "rejection_sample_method=synthetic on the CPU build: vLLM starts, and the first request kills the engine "
        f"({SYNTHETIC_CPU_MESSAGE!r}, {where})",
        "drop rejection_sample_method from --speculative-config on CPU (GPU only)",
        "synthetic acceptance on CPU",
    )


RULES = (
    Rule(
        "synthetic acceptance",
        "no synthetic acceptance sampler on the CPU build",
        "vLLM's CPU sampler starts with rejection_sample_method=synthetic and raises at the first request.",
        f"the '{SYNTHETIC_CPU_MESSAGE}' raise in vllm/utils/cpu_triton_utils.py",
        "drop rejection_sample_method on CPU",
        _check_synthetic,
        silent_at_startup="vLLM's CPU sampler raises at the first request, not at start-up",
        facts=(Fact("CPU synthetic-acceptance refusal", lambda s, _: synthetic_cpu_refusal(s)),),
    ),
)
