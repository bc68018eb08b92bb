"""The drafter itself: vLLM starts each of these plans, and the drafter then guesses worse or wrong."""

from __future__ import annotations

from kimi_dflash.plan import SLIDING_DRAFTER_BACKEND  # what the plan gives a sliding-window drafter (#53323)
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Fact, Finding, Rule, failed, label, passed, warned
from kimi_dflash.rules.rope_amplitude import (
    ROPE_FIX_KEY,
    SAME_AMPLITUDE,
    DrafterRope,
    ReleaseAmplitude,
    UnreadableRope,
    drafter_rope,
    release_amplitude,
    trained_amplitude,
)
from kimi_dflash.rules.source import VllmSource

ROPE_OVERLAY = "launcher: drafter RoPE overlay"


def _check_quantized_drafter(deployment: Deployment, source: VllmSource) -> list[Finding]:
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
    return [
        failed(
            f"weight-quantised DFlash drafter: {'; '.join(reasons)}{mapping}. A quantised DFlash drafter breaks, "
            f"silently corrupts output or collapses acceptance (vllm #51581, #61003, open in every release to "
            f"{label(source)}); vLLM starts",
            "use the unquantised (BF16) drafter checkpoint and drop speculative_config.quantization",
            "quantised DFlash drafter (#51581, #61003)",
        )
    ]


def _rope_verdict(deployment: Deployment, source: VllmSource) -> tuple[DrafterRope, ReleaseAmplitude, float] | None:
    """The drafter's YaRN fields, the amplitude this release gives them and the one they were trained with; None
    for a drafter that is not a z-lab Kimi DFlash drafter (UnreadableRope when the source cannot be evaluated)."""
    drafter = deployment.drafter
    rope = None if drafter is None or not deployment.dflash else drafter_rope(drafter.config)
    trained = None if rope is None else trained_amplitude(rope)
    if rope is None or trained is None:
        return None
    return rope, release_amplitude(source, rope), trained


def _check_rope_amplitude(deployment: Deployment, source: VllmSource) -> list[Finding]:
    try:
        found = _rope_verdict(deployment, source)
    except UnreadableRope as error:
        return [warned(f"cannot read {label(source)}'s YaRN amplitude: {error}", "confirm acceptance by position")]
    if found is None:
        return []
    rope, release, trained = found
    gets = f"the drafter gets RoPE amplitude {round(release.amplitude, 4)} ({release.where})"
    stated = rope.attention_factor is not None
    if abs(release.amplitude - trained) < SAME_AMPLITUDE:
        states = f"; its config.json states attention_factor {rope.attention_factor:.7f}" if stated else ""
        return [passed(f"{gets}, as trained ({round(trained, 4)}){states}: nothing needed")]
    if stated:  # a release before 0.30 ignores the field (get_rope does not pass it on)
        return [
            warned(
                f"{gets} vs the attention_factor {round(trained, 4)} its config.json states: {label(source)} "
                f"ignores attention_factor ({release.factory_where})",
                "vLLM >= 0.30.0, which honours attention_factor",
            )
        ]
    differs = f"{gets} vs trained {round(trained, 4)}: {label(source)} honours mscale = mscale_all_dim = 1.0"
    overlay = (
        f"the launcher's overlay serves the drafter with {rope.field}.attention_factor = {trained:.7f} "
        f"(docs/patches.md; {ROPE_FIX_KEY}=0 turns it off)"
    )
    if deployment.drafter_rope_fix:
        return [passed(f"{differs}; fix applied: {overlay}", relies=(ROPE_OVERLAY,))]
    state = f"{ROPE_FIX_KEY}=0" if deployment.drafter_rope_fix is False else "a bare command line, no launcher"
    return [
        warned(
            f"{differs}; not restored ({state}): acceptance drops with no message (the output stays the target's)",
            f"{ROPE_FIX_KEY}=1 (the default): {overlay}",
        )
    ]


def _amplitude_cell(source: VllmSource, deployment: Deployment) -> str:
    try:
        found = _rope_verdict(deployment, source)
    except UnreadableRope:
        return "unreadable"
    if found is None:
        return "-"
    _rope, release, trained = found
    if abs(release.amplitude - trained) < SAME_AMPLITUDE:
        return f"{round(release.amplitude, 4)} as trained (`{release.where}`)"
    return f"{round(release.amplitude, 4)} vs trained {round(trained, 4)} (`{release.where}`); fix: launcher overlay"


def _check_sliding_window_drafter(deployment: Deployment, source: VllmSource) -> list[Finding]:
    drafter, backend = deployment.drafter, deployment.drafter_attention_backend
    if deployment.platform != "rocm" or drafter is None or not drafter.sliding_window:
        return []
    if backend not in (None, "ROCM_ATTN"):
        return [passed(f"the sliding-window drafter runs on {backend}, not ROCM_ATTN (vllm #53323)")]
    return [
        failed(
            f"the drafter has sliding-window layers and runs on {backend or 'ROCM_ATTN (ROCm default for drafts)'}: "
            f"its acceptance drops under batching (vllm #53323, open to {label(source)}); vLLM starts",
            f"DRAFT_ATTENTION_BACKEND={SLIDING_DRAFTER_BACKEND} (the plan sets it when it reads the drafter's "
            "sliding-window config.json at DRAFT_MODEL_DIR and the key is empty)",
            "sliding-window drafter on ROCM_ATTN (#53323)",
        )
    ]


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
        "the drafter gets the YaRN RoPE amplitude it was trained with",
        "z-lab's Kimi DFlash drafters (rope_scaling yarn, factor 64, mscale = mscale_all_dim = 1.0) were trained "
        "with amplitude 0.1 ln 64 + 1 = 1.4159, what vLLM gave up to 0.29; from 0.30 it gives 1.0 and acceptance "
        "drops with no message.",
        "get_rope's yarn branch (rotary_embedding/__init__.py) and YaRNScalingRotaryEmbedding.__init__ "
        "(yarn_scaling_rope.py), evaluated for the drafter's config.json rope fields (rules/rope_amplitude.py)",
        "DRAFTER_ROPE_FIX=1 (default): the launcher's overlay adds rope_scaling.attention_factor = 1.4159",
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
