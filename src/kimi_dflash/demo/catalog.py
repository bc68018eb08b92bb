"""The demo models a config can ask for (FABRICATE_DEMO_MODELS) and what the launcher needs about each (stdlib)."""

from __future__ import annotations

from dataclasses import dataclass

KIMI = "KimiK25ForConditionalGeneration"


@dataclass(frozen=True)
class DemoChoice:
    name: str  # the FABRICATE_DEMO_MODELS value
    bundle: str  # the cached, fabricated-together directory it lives in
    summary: str
    target: str = "target"  # the target's subdirectory in the bundle (the drafter is always "drafter")
    architecture: str = KIMI  # what the target's config.json says
    mla: bool = True  # vLLM's CPU MLA backend forces KV blocks of 16; CPU_ATTN needs multiples of 32
    serves_on_cpu: bool = True
    recommended_num_speculative_tokens: int = 4
    max_num_speculative_tokens: int = 15
    speculative_method: str = "dflash"  # the drafter's kind (SPECULATIVE_METHOD)
    same_target_as: str = ""  # another choice whose target this one fabricates too (a shoot-out may compare them)


CHOICES: dict[str, DemoChoice] = {
    choice.name: choice
    for choice in (
        DemoChoice("kimi", "kimi", "miniature Kimi K2.6 (MLA + MoE, bfloat16 experts) + DFlash drafter"),
        DemoChoice(
            "kimi-int4",
            "kimi",
            "the same miniature with INT4 compressed-tensors routed experts, as Kimi K2.6 ships them "
            "(no vLLM CPU kernel runs them: for compatibility checks)",
            target="target-int4",
            serves_on_cpu=False,
        ),
        DemoChoice(
            "kimi-eagle3",
            "kimi-eagle3",
            "the same miniature with an EAGLE3-MLA drafter (Eagle3DeepseekV3ForCausalLM, SPECULATIVE_METHOD=eagle3), "
            "the second drafter kind (configs/demo-cpu-eagle3.env)",
            recommended_num_speculative_tokens=3,
            speculative_method="eagle3",
            same_target_as="kimi",
        ),
        DemoChoice(
            "kimi-cuda",
            "kimi-cuda",
            "the miniature Kimi with Kimi K2.6's own MLA head sizes (8 heads, qk_nope 128, v 128: what vLLM's MLA "
            "prefill takes on an NVIDIA Hopper GPU), bfloat16 experts, the same drafter",
        ),
        DemoChoice(
            "kimi-int4-cuda",
            "kimi-cuda",
            "the CUDA miniature with INT4 compressed-tensors routed experts, as Kimi K2.6 ships them "
            "(configs/demo-gpu.env: one Hopper GPU)",
            target="target-int4",
            serves_on_cpu=False,
        ),
        DemoChoice(
            "qwen3",
            "qwen3",
            "tiny Qwen3 (GQA, dense) + DFlash drafter, the first demo",
            architecture="Qwen3ForCausalLM",
            mla=False,
        ),
    )
}
NONE = "none"  # FABRICATE_DEMO_MODELS=none: serve MODEL_DIR / DRAFT_MODEL_DIR
DEFAULT = "kimi"


def choice(name: str) -> DemoChoice:
    try:
        return CHOICES[name]
    except KeyError:
        raise ValueError(f"unknown demo model {name!r}; choose one of {', '.join(CHOICES)}") from None
