"""The DFlash drafter itself: a weight-quantised drafter breaks or silently corrupts output (vllm #51581, open in
every release 0.20-0.33). vLLM starts it."""

from __future__ import annotations

from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Finding, Rule, failed, label, passed
from kimi_dflash.rules.source import VllmSource


def _check_quantized_drafter(deployment: Deployment, source: VllmSource) -> list[Finding]:
    if not deployment.dflash:
        return []
    spec_quant, drafter = deployment.speculative.get("quantization"), deployment.drafter
    reasons = [f"--speculative-config quantization={spec_quant}"] if spec_quant not in (None, "", "none") else []
    if drafter is not None and drafter.quantization:
        reasons.append(f"the drafter checkpoint has quantization_config ({drafter.quantization}, {drafter.origin})")
    if not reasons:
        return [passed("the DFlash drafter is unquantised")] if drafter is not None else []
    return [
        failed(
            f"weight-quantised DFlash drafter: {'; '.join(reasons)}. A quantised DFlash drafter breaks or silently "
            f"corrupts output (vllm #51581, open in every release to {label(source)}); vLLM starts",
            "use the unquantised (BF16) drafter checkpoint and drop speculative_config.quantization",
            "quantised DFlash drafter (#51581)",
        )
    ]


RULES = (
    Rule(
        "quantized drafter",
        "the DFlash drafter is not weight-quantised",
        "A weight-quantised DFlash drafter breaks or silently corrupts output.",
        "the drafter's config.json quantization_config and speculative_config.quantization (no fix in 0.20-0.33)",
        "use the BF16 drafter",
        _check_quantized_drafter,
        silent_at_startup="a weight-quantised drafter builds and loads; its output is wrong only when it runs",
        upstream=("vllm #51581 (open)",),
    ),
)
