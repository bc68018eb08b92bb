"""AITER MLA on ROCm: the verify length on padded-head ranks, verify lengths that are not a power of 2, and the
gfx950-only Gluon decode (each rule's `why` below has the facts)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kimi_dflash.core.checks import failed, passed, warned
from kimi_dflash.rules.catalog.depth_schedule import scheduled_depths
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Fact, Findings, Rule, label
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
    """`AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN`, `_AITER_MIN_MLA_HEADS` and the routing predicate that reads the cap.
    None without the module; cap None without the limit (0.20-0.27: no length routing in vLLM)."""
    tree = source.tree(AITER_MLA)
    if tree is None:
        return None
    constants = source.class_constants(AITER_MLA, "AiterMLAHelper").items()
    ints = {name: (value, line) for name, (value, line) in constants if isinstance(value, int)}
    cap, heads = ints.get("_ASM_PADDED_MAX_PS_QLEN"), ints.get("_AITER_MIN_MLA_HEADS")
    ors = (n for n in ast.walk(tree) if isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or))
    routing = next((n for n in ors if "_ASM_PADDED_MAX_PS_QLEN" in ast.unparse(n)), None)
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


def _on_aiter_mla(deployment: Deployment) -> bool:
    return deployment.platform == "rocm" and deployment.aiter_mla and bool(deployment.target and deployment.target.mla)


def _check_verify_length(deployment: Deployment, source: VllmSource) -> Findings:
    k, target = deployment.num_speculative_tokens, deployment.target
    if not _on_aiter_mla(deployment) or k is None or target is None:
        return []
    cap = aiter_verify_cap(source)
    if cap is None:
        return warned(f"cannot verify: {AITER_MLA} is not in {label(source)}")
    tp, min_heads, qlen = deployment.tensor_parallel_size, cap.min_heads or 16, 1 + k
    heads = None if target.attention_heads is None else target.attention_heads // tp
    if heads is not None and heads >= min_heads:
        return passed(f"{heads} heads per rank at TP {tp}: no head padding, the verify length is not capped")
    padded = f"{heads} heads per rank at TP {tp}, padded to {min_heads}" if heads else "heads per rank unknown"
    if cap.cap is None:
        if qlen <= 4:
            return passed(f"verify length {qlen} (1 + k={k}); {label(source)} routes no length limit")
        return warned(
            f"verify length {qlen} (1 + k={k}), {padded}: {label(source)}'s {AITER_MLA} routes no verify length, "
            "so aiter's kernel list decides; releases 0.28+ cap the padded persistent decode at 4 (vllm #55609, "
            "#57642; ROCm/aiter #2760)",
            "NUM_SPECULATIVE_TOKENS <= 3, or confirm the verify step on the hardware",
        )
    if qlen <= cap.cap:
        return passed(
            f"verify length {qlen} (1 + k={k}) <= {cap.cap}, the padded persistent decode limit "
            f"(_ASM_PADDED_MAX_PS_QLEN, {cap.defined_at}); {padded}"
        )
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
    return failed(
        f"NUM_SPECULATIVE_TOKENS={k} sends verify steps of 1 + {k} = {qlen} query tokens, above the {cap.cap} "
        f"AITER MLA decodes on its padded persistent path ({padded}; _ASM_PADDED_MAX_PS_QLEN = {cap.cap} at "
        f"{cap.defined_at}, routing at {cap.used_at}): {effect}. The output would not be the target's (not "
        "lossless); vLLM starts and gives no warning. Upstream: vllm #55609, #57642 (gfx942, open); ROCm/aiter "
        "#2760, #5679",
        f"set NUM_SPECULATIVE_TOKENS <= {cap.cap - 1}, or ROCM_USE_AITER_MLA=false (TRITON_MLA)",
        f"AITER MLA verify 1+k > {cap.cap}: output not the target's",
    )


def _check_power_of_two(deployment: Deployment, source: VllmSource) -> Findings:
    depths = scheduled_depths(deployment) if _on_aiter_mla(deployment) else ()
    odd = [k for k in depths if k & (k + 1)]  # 1 + k is a power of 2 exactly when k & (k + 1) == 0
    if not odd:
        return [passed(f"verify lengths {[1 + k for k in depths]} are powers of 2")] if depths else []
    handed = source.line_of("vllm/_aiter_ops.py", "def _rocm_aiter_mla_decode_fwd_impl")
    lengths = ", ".join(f"{1 + k} (k={k})" for k in odd)
    return warned(
        f"on ROCM_AITER_MLA the verify length 1 + k is not a power of 2 at {lengths}: ROCm/aiter #2720 (open) says "
        "mla_decode_stage1_asm_fwd then gives every query position the output of position 0 (reported on gfx950 "
        f"in EAGLE3 verification; gfx942 not reported); {label(source)} hands max_seqlen_qo to aiter unpadded"
        f"{f' ({handed})' if handed else ''}. If it holds here, the output is not the target's",
        "confirm with kimi-dflash qualify's token identity at this k; where it differs, ROCM_USE_AITER_MLA=false "
        "(TRITON_MLA for the target) or k = 1 or 3 only (verify 2 or 4; past 4 meets aiter #5679) in "
        "NUM_SPECULATIVE_TOKENS and NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE",
    )


def gluon_gate(source: VllmSource) -> tuple[SourceLine, bool] | None:
    """`AiterMLAHelper.use_gluon_decode` (0.27+: single-token decode on a padded-head rank goes to aiter's Gluon
    kernel) and whether it asks for a gfx950 build first (0.28+); None without a Gluon decode."""
    helper = source.function(AITER_MLA, "AiterMLAHelper.use_gluon_decode")
    body = "" if helper is None else ast.unparse(helper)
    gated = "gfx950" in body or "_gluon_mla_decode_supported" in body
    return None if helper is None else (SourceLine(AITER_MLA, helper.lineno), gated)


def _check_gluon(deployment: Deployment, source: VllmSource) -> Findings:
    gate = gluon_gate(source) if _on_aiter_mla(deployment) else None
    heads = deployment.target.attention_heads if deployment.target else None
    if gate is None:
        return []
    if gate[1] or (heads is not None and heads // deployment.tensor_parallel_size >= 16):
        return passed(f"the Gluon MLA decode is asked for only where it has a kernel ({gate[0]})")
    return failed(
        f"{label(source)} sends single-token decode on ranks with fewer than 16 heads (Kimi K2.6 at TP 8: 8) to "
        f"aiter's Gluon MLA kernel without asking for gfx950 ({gate[0]}); it has a gfx950 build only, so on "
        "gfx942 (MI300X) the start fails: 'AssertionError: mla_gluon requires gfx950' (vllm #51964; 0.28.0 "
        "gates it to gfx950)",
        "use vLLM 0.28.0 or later (or 0.26.0), or ROCM_USE_AITER_MLA=false (TRITON_MLA)",
        "mla_gluon requires gfx950 (#51964)",
    )


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
    Rule(
        "aiter mla verify power of 2",
        "every verify length 1 + k on ROCM_AITER_MLA is a power of 2 (NUM_SPECULATIVE_TOKENS and each scheduled k)",
        "ROCm/aiter #2720 (open): the ASM decode gives every query position position 0's output when max_seqlen_q is "
        "not a power of 2; production's k = 2 verifies 3. A warning, not a refusal: it was reported on gfx950, the "
        "recipe measured k = 2 with TRITON_MLA forced, and only token identity on the box (qualify) can judge AITER "
        "at k = 2 on gfx942; k = 1 and 3 are the AITER depths not known to be wrong (aiter #5679 past 4).",
        "the plan's k and schedule; where vLLM hands max_seqlen_qo to aiter (_aiter_ops.py)",
        "kimi-dflash qualify's token identity; ROCM_USE_AITER_MLA=false, or NUM_SPECULATIVE_TOKENS=1 or 3",
        _check_power_of_two,
        silent_at_startup="the kernel returns wrong values for some query lengths; nothing fails",
        upstream=("ROCm/aiter #2720 (open)", "ROCm/aiter #5679"),
    ),
    Rule(
        "aiter mla gluon on gfx942",
        "AITER MLA's small-head Gluon decode is asked for only where it has a kernel",
        "0.27.0-0.27.1 send single-token decode on ranks with fewer than 16 heads (Kimi K2.6 at TP 8) to aiter's "
        "Gluon kernel, built for gfx950 only: Kimi does not start on gfx942 (MI300X). 0.28.0 gates it to gfx950.",
        "AiterMLAHelper.use_gluon_decode (v1/attention/backends/mla/rocm_aiter_mla.py)",
        "vLLM >= 0.28.0 (or <= 0.26.0), or ROCM_USE_AITER_MLA=false",
        _check_gluon,
        silent_at_startup="the kernel asserts its architecture when first called (warm-up), after config and backend "
        "selection",
        upstream=("vllm #51964",),
    ),
)
