"""AITER MLA's verify length on padded-head ranks (the rule's `why` below has the facts)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Fact, Finding, Rule, failed, label, passed, warned
from kimi_dflash.rules.source import SourceLine, VllmSource

AITER_MLA = "vllm/v1/attention/backends/mla/rocm_aiter_mla.py"
UPSTREAM = ("vllm #55609", "vllm #57642", "ROCm/aiter #2760", "ROCm/aiter #5679")


@dataclass(frozen=True)
class VerifyCap:
    """How AITER MLA's decode treats a verify step on a rank whose heads are padded to `min_heads`."""

    cap: int | None  # _ASM_PADDED_MAX_PS_QLEN: the longest query a padded rank decodes on the persistent path
    min_heads: int | None  # _AITER_MIN_MLA_HEADS: fewer heads per rank than this are padded
    fp8_keeps_schedule: bool  # the routing keeps the persistent schedule for a quantised KV cache past the cap
    defined_at: SourceLine  # where the cap is defined (or the module, when absent)
    used_at: SourceLine | None  # the routing predicate that reads it


def aiter_verify_cap(source: VllmSource) -> VerifyCap | None:
    """`AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN` and `_AITER_MIN_MLA_HEADS` in rocm_aiter_mla.py, and the routing
    predicate `use_persistent_metadata` (`... or max_qo_len <= _ASM_PADDED_MAX_PS_QLEN or
    is_quantized_kv_cache(...)`). None when the module is absent; cap None when the module has no such limit
    (0.20-0.27: padded heads go to aiter's decode with no length routing in vLLM)."""
    tree = source.tree(AITER_MLA)
    if tree is None:
        return None
    constants = source.class_constants(AITER_MLA, "AiterMLAHelper").items()
    ints = {name: (value, line) for name, (value, line) in constants if isinstance(value, int)}
    cap, heads = ints.get("_ASM_PADDED_MAX_PS_QLEN"), ints.get("_AITER_MIN_MLA_HEADS")
    routing = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or)
         and "_ASM_PADDED_MAX_PS_QLEN" in ast.unparse(n)),
        None,
    )  # fmt: skip
    return VerifyCap(
        cap=None if cap is None else cap[0],
        min_heads=None if heads is None else heads[0],
        fp8_keeps_schedule=routing is not None and "is_quantized_kv_cache" in ast.unparse(routing),
        defined_at=SourceLine(AITER_MLA, None if cap is None else cap[1]),
        used_at=None if routing is None else SourceLine(AITER_MLA, routing.lineno),
    )


def _cap_cell(source: VllmSource, _deployment: Deployment) -> str:
    cap = aiter_verify_cap(source)
    return "none" if cap is None or cap.cap is None else f"qlen {cap.cap} (`{cap.defined_at}`, routing `{cap.used_at}`)"


def _check_verify_length(deployment: Deployment, source: VllmSource) -> list[Finding]:
    k, target = deployment.num_speculative_tokens, deployment.target
    if deployment.platform != "rocm" or not deployment.aiter_mla or k is None or target is None or not target.mla:
        return []
    cap = aiter_verify_cap(source)
    if cap is None:
        return [warned(f"cannot verify: {AITER_MLA} is not in {label(source)}")]
    tp = deployment.tensor_parallel_size
    heads = None if target.attention_heads is None else target.attention_heads // tp
    min_heads = cap.min_heads or 16
    qlen = 1 + k
    if heads is not None and heads >= min_heads:
        return [passed(f"{heads} heads per rank at TP {tp}: no head padding, the verify length is not capped")]
    padded = f"{heads} heads per rank at TP {tp}, padded to {min_heads}" if heads else "heads per rank unknown"
    if cap.cap is None:
        if qlen <= 4:
            return [passed(f"verify length {qlen} (1 + k={k}); {label(source)} routes no length limit")]
        return [
            warned(
                f"verify length {qlen} (1 + k={k}), {padded}: {label(source)}'s {AITER_MLA} routes no verify length, "
                "so aiter's kernel list decides; releases 0.28+ cap the padded persistent decode at 4 (vllm #55609, "
                "#57642; ROCm/aiter #2760)",
                "NUM_SPECULATIVE_TOKENS <= 3, or confirm the verify step on the hardware",
            )
        ]
    if qlen <= cap.cap:
        return [
            passed(
                f"verify length {qlen} (1 + k={k}) <= {cap.cap}, the padded persistent decode limit "
                f"(_ASM_PADDED_MAX_PS_QLEN, {cap.defined_at}); {padded}"
            )
        ]
    if deployment.kv_cache_dtype.startswith("fp8") and cap.fp8_keeps_schedule:
        effect = (
            "with an FP8 KV cache the routing keeps the persistent schedule past the limit (the source's comment: "
            "'fp8 keeps the schedule -- its fold rejects non-persistent outright'), and the persistent kernel for "
            "longer queries is reached only by a gfx950-only fold: on gfx942 (MI300X) the verify step has no kernel"
        )
    else:
        effect = (
            "with a BF16 KV cache the routing leaves the persistent schedule and decodes on the non-persistent "
            "qseqlen=8 entry, which returns wrong output on gfx942 (ROCm/aiter #5679), not only slower output"
        )
    return [
        failed(
            f"NUM_SPECULATIVE_TOKENS={k} sends verify steps of 1 + {k} = {qlen} query tokens, above the {cap.cap} "
            f"AITER MLA decodes on its padded persistent path ({padded}; _ASM_PADDED_MAX_PS_QLEN = {cap.cap} at "
            f"{cap.defined_at}, routing at {cap.used_at}): {effect}. The output would not be the target's (not "
            "lossless); vLLM starts and gives no warning. Upstream: vllm #55609, #57642 (gfx942, open); ROCm/aiter "
            "#2760, #5679",
            f"set NUM_SPECULATIVE_TOKENS <= {cap.cap - 1}, or ROCM_USE_AITER_MLA=false (TRITON_MLA)",
            f"AITER MLA verify 1+k > {cap.cap}: output not the target's",
        )
    ]


RULES = (
    Rule(
        "aiter mla verify length",
        "1 + k fits the verify length AITER MLA decodes on its padded persistent path",
        "At TP 8 Kimi K2.6 has 8 heads per rank, padded to 16; AITER MLA's persistent ASM decode for padded ranks "
        "goes to query length 4. Longer verify steps leave it (BF16: the non-persistent entry, wrong output on gfx942, "
        "aiter #5679) or keep a schedule gfx942 has no kernel for (FP8): the output would not be the target's.",
        "AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN, _AITER_MIN_MLA_HEADS and the use_persistent_metadata predicate "
        "(v1/attention/backends/mla/rocm_aiter_mla.py)",
        "NUM_SPECULATIVE_TOKENS <= cap - 1, or ROCM_USE_AITER_MLA=false",
        _check_verify_length,
        silent_at_startup="the verify length is routed per decode step in AITER MLA's metadata builder; start-up "
        "selects the backend and never sees a query length",
        upstream=UPSTREAM,
        facts=(Fact("AITER MLA padded persistent verify cap", _cap_cell),),
    ),
)
