"""DFlash at long context: a net loss near 185k tokens (the rule's `why`), with no vLLM setting to stop it."""

from __future__ import annotations

from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Finding, Rule, label, passed, warned
from kimi_dflash.rules.source import VllmSource

LOSS_CONTEXT = 185_000  # vllm #54691: DFlash measured slower than no speculation near this context length


def context_knobs(source: VllmSource) -> tuple[str, ...]:
    """SpeculativeConfig fields that name a context length (none in 0.20-0.33; RFC #48627 proposes one)."""
    module = source.find_module("SpeculativeConfig", "vllm/config/")
    fields = (source.class_fields(module, "SpeculativeConfig") or ()) if module else ()
    return tuple(f for f in fields if "context" in f)


def _check_long_context(deployment: Deployment, source: VllmSource) -> list[Finding]:
    length = deployment.command.value("--max-model-len") or ""
    if not deployment.dflash or not length.isdigit():
        return []
    if int(length) < LOSS_CONTEXT:
        return [passed(f"--max-model-len {length} stays below ~{LOSS_CONTEXT}, where DFlash turns into a loss")]
    knobs = context_knobs(source)
    offer = (
        f"SpeculativeConfig offers {', '.join(knobs)}: see whether it stops speculation past a length"
        if knobs
        else "has no setting that stops speculation by context length (its speculative max_model_len only sizes the "
        "drafter)"
    )
    return [
        warned(
            f"MAX_MODEL_LEN={length} admits prompts past ~{LOSS_CONTEXT} tokens, where DFlash was measured slower than "
            f"no speculation (vllm #54691); {label(source)} {offer}",
            f"serve prompts past ~{LOSS_CONTEXT} from a SPECULATIVE_METHOD=none server (MAX_MODEL_LEN below it here), "
            "or measure the loss with long prompts",
        )
    ]


RULES = (
    Rule(
        "dflash long context",
        "no DFlash past the context length where it loses",
        "DFlash becomes a net loss near 185k tokens of context (vllm #54691; z-lab's drafters were trained on shorter "
        "contexts). vLLM has no per-request switch by context length: a warning while MAX_MODEL_LEN admits them.",
        "--max-model-len; SpeculativeConfig fields naming a context length",
        "MAX_MODEL_LEN below ~185k for the DFlash server, longer prompts to a server without speculation",
        _check_long_context,
        silent_at_startup="a speed loss on long prompts; nothing fails",
        upstream=("vllm #54691", "vllm RFC #48627"),
    ),
)
