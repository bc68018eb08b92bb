"""The drafter itself: vLLM starts each of these plans, and the drafter then guesses worse or wrong."""

from __future__ import annotations

from kimi_dflash.config.schema import KEY
from kimi_dflash.core.checks import Remedy, failed, passed, warned
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Fact, Findings, Rule, label
from kimi_dflash.rules.rope_amplitude import (
    ENGINE,
    LEGACY,
    RopeDecision,
    UnreadableRope,
    concerned,
    decide,
    same_amplitude,
)
from kimi_dflash.rules.source import VllmSource

ROPE_OVERLAY = "drafter RoPE overlay"
SLIDING_DRAFTER_BACKEND = "TRITON_ATTN"  # ROCM_ATTN loses a sliding-window drafter's acceptance under batching


def _check_quantized_drafter(deployment: Deployment, source: VllmSource) -> Findings:
    if not deployment.dflash:
        return []
    spec_quant, drafter = deployment.speculative.get("quantization"), deployment.drafter
    reasons = [f"--speculative-config quantization={spec_quant}"] if spec_quant not in (None, "", "none") else []
    if drafter is not None and drafter.quantization:
        reasons.append(f"the drafter checkpoint has quantization_config ({drafter.quantization}, {drafter.origin})")
    if not reasons:
        return [passed("the DFlash drafter is unquantised")] if drafter is not None else []
    ignored = drafter is not None and "ignored_layers" in str(drafter.config.get("quantization_config", ""))
    mapping = (
        "; its fp8 ignored_layers name the drafter's own layers, which vLLM does not map to the drafter's layer "
        "prefix, so the layers meant to stay BF16 are quantised too (vllm #61003: acceptance length 4.3 -> 1.0)"
        if ignored
        else ""
    )
    return failed(
        f"weight-quantised DFlash drafter: {'; '.join(reasons)}{mapping}. A quantised DFlash drafter breaks, "
        f"silently corrupts output or collapses acceptance (vllm #51581, #61003, open in every release to "
        f"{label(source)}); vLLM starts",
        "use the unquantised (BF16) drafter checkpoint and drop speculative_config.quantization",
        "quantised DFlash drafter (#51581, #61003)",
    )


def _rope(deployment: Deployment, source: VllmSource) -> RopeDecision | None:
    """The drafter RoPE decision (rules/rope_amplitude.py) for a DFlash drafter whose rope it understands."""
    drafter = deployment.drafter
    useful = deployment.dflash and drafter is not None and concerned(drafter)
    return decide(drafter, source, deployment.drafter_rope_amplitude) if useful and drafter else None


def _check_rope_amplitude(deployment: Deployment, source: VllmSource) -> Findings:
    try:
        decision = _rope(deployment, source)
    except UnreadableRope as error:
        return warned(f"cannot read {label(source)}'s YaRN amplitude: {error}", "confirm acceptance by position")
    if decision is None or decision.fix:
        return [] if decision is None else [warned(decision.message, decision.fix)]
    # The overlay to build (the decision is its value), or the one already served.
    overlay = decision.overlay or (deployment.drafter and deployment.drafter.overlay)
    relies = (Remedy("overlay", ROPE_OVERLAY, decision if decision.overlay else None),) if overlay else ()
    return passed(decision.message, relies=relies)


def _amplitude_cell(source: VllmSource, deployment: Deployment) -> str:
    try:
        decision = _rope(deployment, source)
    except UnreadableRope:
        return "unreadable"
    if decision is None:
        return "-"
    release, where = round(decision.release.amplitude, 4), f"(`{decision.release.where}`)"
    if same_amplitude(decision.release.amplitude, decision.legacy):
        return f"{release}, as {LEGACY} {where}"
    return f"{release} vs {LEGACY} {round(decision.legacy, 4)} {where}; {LEGACY}: launcher overlay"


def _check_sliding_window_drafter(deployment: Deployment, source: VllmSource) -> Findings:
    drafter, backend = deployment.drafter, deployment.drafter_attention_backend
    if deployment.platform != "rocm" or drafter is None or not drafter.sliding_window:
        return []
    if backend not in (None, "ROCM_ATTN"):
        return passed(f"the sliding-window drafter runs on {backend}, not ROCM_ATTN (vllm #53323)")
    key = KEY.DRAFT_ATTENTION_BACKEND
    if backend is None and deployment.option_keys:  # a launcher's plan, the key left empty: serve sets it
        remedy = Remedy("config", key, SLIDING_DRAFTER_BACKEND)
        return [
            passed(f"the drafter has sliding-window layers: serve sets {key}={remedy.value} (vllm #53323)", (remedy,))
        ]
    return failed(
        f"the drafter has sliding-window layers and runs on {backend or 'ROCM_ATTN (ROCm default for drafts)'}: "
        f"its acceptance drops under batching (vllm #53323, open to {label(source)}); vLLM starts",
        f"{key}={SLIDING_DRAFTER_BACKEND} (serve sets it when the key is empty)",
        "sliding-window drafter on ROCM_ATTN (#53323)",
    )


RULES = (
    Rule(
        "quantized drafter",
        "the DFlash drafter is not weight-quantised",
        "A weight-quantised DFlash drafter breaks, silently corrupts output, or collapses acceptance: fp8 "
        "ignored_layers are not mapped to the drafter's layers.",
        "the drafter's config.json quantization_config (ignored_layers) and speculative_config.quantization "
        "(no fix in 0.20-0.33)",
        "use the BF16 drafter",
        _check_quantized_drafter,
        silent_at_startup="a weight-quantised drafter builds and loads; its output is wrong only when it runs",
        upstream=("vllm #51581 (open)", "vllm #61003 (open)"),
    ),
    Rule(
        "drafter rope amplitude",
        "the drafter is served with the RoPE amplitude DRAFTER_ROPE_AMPLITUDE names",
        "z-lab's Kimi DFlash drafters (yarn, factor 64, mscale = mscale_all_dim = 1.0) get 1.4159 from vLLM <= 0.29 "
        "(every published acceptance was measured with it) and 1.0 from 0.30 (transformers' value). Which serves "
        "best is measured, not known: the key names it.",
        "get_rope's branch for the rope type and the embedding's __init__ (yarn, deepseek_yarn), evaluated for the "
        "drafter's rope fields (rules/rope_amplitude.py)",
        f"{KEY.DRAFTER_ROPE_AMPLITUDE}={LEGACY} (default) or {ENGINE}: the launcher's overlay sets attention_factor "
        "where they differ",
        _check_rope_amplitude,
        silent_at_startup="the amplitude scales the cos/sin cache; the drafter builds and runs, it only guesses worse",
        upstream=("vllm-ascend _normalize_kimi_dflash_rope", "issue 28"),
        facts=(Fact("drafter RoPE amplitude (z-lab K2.5 drafter)", _amplitude_cell),),
    ),
    Rule(
        "sliding-window drafter",
        "a sliding-window drafter on ROCm does not run on ROCM_ATTN",
        "ROCm gives a draft model ROCM_ATTN; with sliding-window layers its acceptance drops under batching. "
        "TRITON_ATTN for the draft keeps it.",
        "the drafter's config.json (sliding_window, layer_types) and speculative_config.attention_backend",
        f"DRAFT_ATTENTION_BACKEND={SLIDING_DRAFTER_BACKEND}",
        _check_sliding_window_drafter,
        silent_at_startup="the backend runs the window; acceptance drops only with several requests in a batch",
        upstream=("vllm #53323 (open)",),
    ),
)
