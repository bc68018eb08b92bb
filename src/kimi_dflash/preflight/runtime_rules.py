"""Compatibility rules for plans that start and then run wrong or slow: the runtime traps of vLLM 0.20-0.33.

Same shape as compat_rules (a CompatRule per trap, findings pass / warn / fail), judged from facts read out of
vLLM's source by runtime_facts. Each rule names the upstream issue, the source line it read and the fix; what
no source can show (a kernel's speed, a silent numerical fault) is stated as what a first run on hardware must
confirm (docs/compatibility.md, "Runtime rules").
"""

from __future__ import annotations

import json

from kimi_dflash.core.envvars import ALLOW_DFLASH_PREFIX_CACHING
from kimi_dflash.patcher.vllm_source import VllmSource
from kimi_dflash.preflight import runtime_facts as facts
from kimi_dflash.preflight.compat_rules import RULES, CompatRule, Finding, _blame, _fail, _label, _pass, _warn
from kimi_dflash.preflight.cpu_wna16_rule import CPU_WNA16_RULE
from kimi_dflash.preflight.deployment import TRUE_WORDS, Deployment

RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def num_speculative_tokens(deployment: Deployment) -> int | None:
    value = (deployment.command.speculative or {}).get("num_speculative_tokens")
    try:
        return None if value is None else int(str(value))
    except ValueError:
        return None


def tensor_parallel_size(deployment: Deployment) -> int:
    value = deployment.command.value("--tensor-parallel-size") or deployment.command.value("-tp")
    try:
        return int(value) if value else 1
    except ValueError:
        return 1


def enforce_eager(deployment: Deployment) -> bool:
    return deployment.command.flag("--enforce-eager")


# --- AITER MLA verify length ---------------------------------------------------------------------------


def _check_verify_length(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "aiter mla verify length"
    k = num_speculative_tokens(deployment)
    target = deployment.target
    if deployment.platform != "rocm" or not deployment.aiter_mla or k is None or target is None or not target.mla:
        return []
    cap = facts.aiter_verify_cap(source)
    if cap is None:
        return [_warn(rule, f"cannot verify: {facts.AITER_MLA} is not in {_label(source)}")]
    tp = tensor_parallel_size(deployment)
    heads = None if target.attention_heads is None else target.attention_heads // tp
    min_heads = cap.min_heads or 16
    qlen = 1 + k
    if heads is not None and heads >= min_heads:
        return [_pass(rule, f"{heads} heads per rank at TP {tp}: no head padding, the verify length is not capped")]
    padded = f"{heads} heads per rank at TP {tp}, padded to {min_heads}" if heads else "heads per rank unknown"
    if cap.cap is None:
        if qlen <= 4:
            return [_pass(rule, f"verify length {qlen} (1 + k={k}); {_label(source)} routes no length limit")]
        return [
            _warn(
                rule,
                f"verify length {qlen} (1 + k={k}), {padded}: {_label(source)}'s {facts.AITER_MLA} routes no verify "
                "length, so aiter's kernel list decides; releases 0.28+ cap the padded persistent decode at 4 "
                "(vllm #55609, #57642; ROCm/aiter #2760)",
                "NUM_SPECULATIVE_TOKENS <= 3, or confirm the verify step on the hardware",
            )
        ]
    if qlen <= cap.cap:
        return [
            _pass(
                rule,
                f"verify length {qlen} (1 + k={k}) <= {cap.cap}, the padded persistent decode limit "
                f"(_ASM_PADDED_MAX_PS_QLEN, {cap.defined_at}); {padded}",
            )
        ]
    fp8 = deployment.kv_cache_dtype.startswith("fp8")
    if fp8 and cap.fp8_keeps_schedule:
        effect = (
            "with an FP8 KV cache the routing keeps the persistent schedule past the limit (the source's comment: "
            "'fp8 keeps the schedule -- its fold rejects non-persistent outright'), and the persistent kernel for "
            "longer queries is reached only by a gfx950-only fold: on gfx942 (MI300X) the verify step has no "
            "kernel"
        )
    else:
        effect = (
            "with a BF16 KV cache the routing leaves the persistent schedule and decodes on the non-persistent "
            "qseqlen=8 entry (another, slower kernel, per the source's comment)"
        )
    return [
        _fail(
            rule,
            f"NUM_SPECULATIVE_TOKENS={k} sends verify steps of 1 + {k} = {qlen} query tokens, above the {cap.cap} "
            f"AITER MLA decodes on its padded persistent path ({padded}; _ASM_PADDED_MAX_PS_QLEN = {cap.cap} at "
            f"{cap.defined_at}, routing at {cap.used_at}): {effect}. vLLM starts and gives no warning. Upstream: "
            "vllm #55609, #57642 (gfx942, open); ROCm/aiter #2760",
            f"set NUM_SPECULATIVE_TOKENS <= {cap.cap - 1}, or ROCM_USE_AITER_MLA=false (TRITON_MLA)",
            f"AITER MLA verify 1+k > {cap.cap}",
        )
    ]


# --- DFlash + prefix caching ---------------------------------------------------------------------------


def prefix_caching_on(deployment: Deployment, source: VllmSource) -> bool:
    """The plan's --[no-]enable-prefix-caching, else vLLM's default (CacheConfig, True in every release)."""
    options = deployment.command.options
    order = [o for o in options if o in ("--enable-prefix-caching", "--no-enable-prefix-caching")]
    if order:
        return order[-1] == "--enable-prefix-caching"
    return facts.prefix_caching_default(source) is not False


def _check_prefix_caching(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "dflash prefix caching"
    if not deployment.dflash or not prefix_caching_on(deployment, source):
        return []
    target = deployment.target
    cpu_off = facts.cpu_mla_disables_prefix_caching(source)
    if deployment.platform == "cpu" and target is not None and target.mla and cpu_off is not None:
        return [_pass(rule, f"prefix caching on, but the CPU platform turns it off for MLA models ({cpu_off})")]
    fixed = facts.dflash_prefix_fix(source)
    if fixed is not None:
        return [_pass(rule, f"prefix caching with DFlash: the drafter masks restored tokens ({fixed}; vllm #47926)")]
    where = ", ".join(facts.dflash_sources(source)) or "no DFlash source"
    detail = (
        f"prefix caching is on with DFlash, and {_label(source)}'s DFlash code ({where}) has no count of tokens "
        "restored from the prefix cache: their drafter context is never written, and the drafter attends to "
        "stale KV there, so acceptance falls toward 1.0 as cache hits grow (vllm #47930, reported AL 2.98 -> "
        "1.25; fix PR #47926 open). vLLM gives no warning"
    )
    if deployment.env.get(ALLOW_DFLASH_PREFIX_CACHING, "").strip().lower() in TRUE_WORDS:
        return [_warn(rule, detail + "; allowed by ALLOW_DFLASH_PREFIX_CACHING=true")]
    return [
        _fail(
            rule,
            detail,
            f"turn prefix caching off ({_blame(deployment, '--enable-prefix-caching')}), or set "
            "ALLOW_DFLASH_PREFIX_CACHING=true to accept the loss (the check then warns)",
            "DFlash + prefix caching (#47930)",
        )
    ]


# --- model runner ----------------------------------------------------------------------------------------


def runner_choice(deployment: Deployment, source: VllmSource) -> facts.RunnerChoice | None:
    target = deployment.target
    return facts.model_runner(
        source,
        platform=deployment.platform,
        method=deployment.speculative_method,
        moe=bool(target and target.routed_experts),
        quantized=bool(target and (target.quantization or target.wna16_experts)),
        env_value=deployment.env.get(RUNNER_ENV),
        architectures=() if target is None else target.architectures,
    )


def _check_model_runner(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "model runner"
    choice = runner_choice(deployment, source)
    if choice is None:
        return [_warn(rule, f"cannot tell which model runner {_label(source)} picks: no use_v2_model_runner found")]
    detail = f"{_label(source)} runs this plan on Model Runner {choice.runner}: {choice.why} ({choice.where})"
    if choice.runner == "V2" and deployment.kv_scale_mode != "off":
        built = facts.v2_builds_model_layers(source)
        if built is None:
            return [
                _fail(
                    rule,
                    detail + f"; KV_SCALE_MODE={deployment.kv_scale_mode} but the V2 runner's model construction "
                    f"was not found ({facts.V2_RUNNER}), so the KV-scale hook cannot be shown to act on it",
                    f"set {RUNNER_ENV}=0 in the environment, or KV_SCALE_MODE=off",
                    "KV-scale hook on V2",
                )
            ]
        detail += (
            f"; the KV-scale hook wraps the model's MLAAttention layers, which V2 builds through vLLM's model "
            f"loader like V1 ({built})"
        )
    if deployment.platform == "cpu" and choice.runner == "V1":
        detail += "; GPU builds of the same release may run V2 (the CPU demo exercises V1 only)"
    return [_pass(rule, detail)]


# --- quantised drafter -----------------------------------------------------------------------------------


def _check_quantized_drafter(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "quantized drafter"
    if not deployment.dflash:
        return []
    spec_quant = (deployment.command.speculative or {}).get("quantization")
    drafter = deployment.drafter
    reasons = []
    if spec_quant not in (None, "", "none"):
        reasons.append(f"--speculative-config quantization={spec_quant}")
    if drafter is not None and drafter.quantization:
        reasons.append(f"the drafter checkpoint has quantization_config ({drafter.quantization}, {drafter.origin})")
    if not reasons:
        return [_pass(rule, "the DFlash drafter is unquantised")] if drafter is not None else []
    return [
        _fail(
            rule,
            f"weight-quantised DFlash drafter: {'; '.join(reasons)}. A quantised DFlash drafter breaks or silently "
            f"corrupts output (vllm #51581, open in every release to {_label(source)}); vLLM starts",
            "use the unquantised (BF16) drafter checkpoint and drop speculative_config.quantization",
            "quantised DFlash drafter (#51581)",
        )
    ]


# --- graphs with spec decode ---------------------------------------------------------------------------


def capture_sizes(deployment: Deployment) -> list[int] | None:
    """Capture sizes the plan sets: --cudagraph-capture-sizes / --cuda-graph-sizes, or cudagraph_capture_sizes in a
    --compilation-config JSON."""
    for option in ("--cudagraph-capture-sizes", "--cuda-graph-sizes"):
        value = deployment.command.value(option)
        if value:
            try:
                return [int(v) for v in value.replace(",", " ").split()]
            except ValueError:
                return None
    text = deployment.command.value("--compilation-config")
    try:
        config = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    sizes = config.get("cudagraph_capture_sizes") if isinstance(config, dict) else None
    return [int(v) for v in sizes] if isinstance(sizes, list) else None


def _check_graphs(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "graphs with spec decode"
    k = num_speculative_tokens(deployment)
    if enforce_eager(deployment) or deployment.platform == "cpu":
        return []
    findings: list[Finding] = []
    if deployment.kv_scale_mode != "off":
        fusion = facts.mla_kv_write_fusion(source)
        if fusion is not None:
            findings.append(
                _fail(
                    rule,
                    f"KV_SCALE_MODE={deployment.kv_scale_mode} with graphs (ENFORCE_EAGER=false): the compile pass at "
                    f"{fusion} replaces unified_mla_kv_cache_update (which calls impl.do_kv_cache_update, the "
                    "method the KV-scale hook wraps) with a fused rope + cache write, so the hook can be bypassed",
                    "ENFORCE_EAGER=true for FP8 KV-scale modes, or KV_SCALE_MODE=off",
                    "KV-scale hook with graphs",
                )
            )
    if k is None:
        return findings
    step = 1 + k
    sizes = capture_sizes(deployment)
    rounding = facts.capture_size_rounding(source)
    if sizes is None:
        findings.append(
            _warn(
                rule,
                f"graphs with spec decode and no capture sizes set: vLLM's defaults are not multiples of 1 + k = "
                f"{step}; it rounds them only for FULL decode graphs on the V1 runner ({rounding}), and unaligned "
                "PIECEWISE sizes can crash mid-decode (vllm #46324)",
                f"set cudagraph_capture_sizes to multiples of {step} (--compilation-config in EXTRA_VLLM_ARGS)",
            )
        )
    else:
        bad = [s for s in sizes if s % step]
        if bad:
            findings.append(
                _fail(
                    rule,
                    f"capture sizes {bad} are not multiples of 1 + k = {step}: a verify batch padded to them splits "
                    "requests across a graph boundary and can crash mid-decode (vllm #46324)",
                    f"use multiples of {step} only, e.g. {[step * i for i in (1, 2, 4, 8)]}",
                    f"capture sizes not multiples of {step} (#46324)",
                )
            )
        else:
            findings.append(_pass(rule, f"capture sizes {sizes} are multiples of 1 + k = {step}"))
    downgrade = facts.cudagraph_downgrade(source)
    findings.append(
        _warn(
            rule,
            "spec decode can be silently downgraded to PIECEWISE graphs when an attention backend does not support "
            f"FULL for a uniform verify batch (vllm #49547{'; ' + str(downgrade) if downgrade else ''}): nothing "
            "fails, decode is slower",
            "check the server log's resolved cudagraph_mode (FULL_AND_PIECEWISE or FULL_DECODE_ONLY expected)",
        )
    )
    return findings


# --- synthetic acceptance --------------------------------------------------------------------------------


def _check_synthetic(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "synthetic acceptance"
    method = (deployment.command.speculative or {}).get("rejection_sample_method")
    if method != "synthetic":
        return []
    if deployment.platform != "cpu":
        return [_pass(rule, "synthetic acceptance on a GPU platform (a benchmark aid: outputs are not the model's)")]
    where = facts.synthetic_cpu_refusal(source)
    if where is None:
        return [_warn(rule, f"synthetic acceptance on CPU: cannot verify, no CPU sampler refusal in {_label(source)}")]
    return [
        _fail(
            rule,
            f"rejection_sample_method=synthetic on the CPU build: vLLM starts, and the first request kills the engine "
            f"({facts.SYNTHETIC_CPU_MESSAGE!r}, {where})",
            "drop rejection_sample_method from --speculative-config on CPU (GPU only)",
            "synthetic acceptance on CPU",
        )
    ]


RUNTIME_RULES: tuple[CompatRule, ...] = (
    CompatRule(
        "aiter mla verify length",
        "1 + k fits the verify length AITER MLA decodes on its padded persistent path",
        "At TP 8 Kimi K2.6 has 8 heads per rank, padded to 16; AITER MLA's persistent ASM decode for padded ranks "
        "goes to query length 4. Longer verify steps leave it (BF16: the non-persistent kernel) or keep a schedule "
        "gfx942 has no kernel for (FP8). vllm #55609, #57642; ROCm/aiter #2760.",
        "AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN, _AITER_MIN_MLA_HEADS and the use_persistent_metadata predicate "
        "(v1/attention/backends/mla/rocm_aiter_mla.py)",
        "NUM_SPECULATIVE_TOKENS <= cap - 1, or ROCM_USE_AITER_MLA=false",
        _check_verify_length,
    ),
    CompatRule(
        "dflash prefix caching",
        "DFlash with prefix caching only where the drafter handles restored tokens",
        "Tokens restored from the prefix cache never get drafter context; acceptance falls toward 1.0 "
        "(vllm #47930, fix #47926).",
        "a count of restored tokens in v1/spec_decode/dflash.py and v1/worker/gpu/spec_decode/dflash/; "
        "CacheConfig.enable_prefix_caching's default; the CPU platform's MLA override",
        "ENABLE_PREFIX_CACHING=false, or ALLOW_DFLASH_PREFIX_CACHING=true",
        _check_prefix_caching,
    ),
    CompatRule(
        "model runner",
        "which model runner (V1/V2) the plan gets, and whether the KV-scale hook acts on it",
        "GPU builds of 0.29+ run Kimi + DFlash on Model Runner V2; the CPU build (no Triton) runs V1, so the demo "
        "and CI exercise another path than production.",
        "VllmConfig.use_v2_model_runner and the functions it calls (config/vllm.py); the V2 runner's model "
        "construction (v1/worker/gpu/model_runner.py)",
        "VLLM_USE_V2_MODEL_RUNNER=0 pins V1",
        _check_model_runner,
    ),
    CompatRule(
        "quantized drafter",
        "the DFlash drafter is not weight-quantised",
        "A weight-quantised DFlash drafter breaks or silently corrupts output (vllm #51581, open).",
        "the drafter's config.json quantization_config and speculative_config.quantization (no fix in 0.20-0.33)",
        "use the BF16 drafter",
        _check_quantized_drafter,
    ),
    CompatRule(
        "graphs with spec decode",
        "graph mode: capture sizes aligned to 1 + k, no silent PIECEWISE, the KV-scale hook not compiled away",
        "Unaligned PIECEWISE capture sizes can crash (vllm #46324); spec decode can silently fall to PIECEWISE "
        "(#49547); the MLA rope + KV-cache fusion pass replaces the write the KV-scale hook wraps.",
        "CompilationConfig.adjust_cudagraph_sizes_for_spec_decode and the cudagraph_mode fallback "
        "(config/compilation.py); compilation/passes/fusion/mla_rope_kvcache_cat_fusion.py",
        "aligned cudagraph_capture_sizes; ENFORCE_EAGER=true with KV_SCALE_MODE != off",
        _check_graphs,
    ),
    CompatRule(
        "synthetic acceptance",
        "no synthetic acceptance sampler on the CPU build",
        "vLLM's CPU sampler starts with rejection_sample_method=synthetic and raises at the first request.",
        "the 'Synthetic acceptance not supported with CPU sampling' raise in vllm/utils/cpu_triton_utils.py",
        "drop rejection_sample_method on CPU",
        _check_synthetic,
    ),
)

# The CPU WNA16 kernel rule is a start-up rule (visible to the dry engine), judged with the others.
ALL_RULES: tuple[CompatRule, ...] = RULES + (CPU_WNA16_RULE,) + RUNTIME_RULES

# Start-up visible: no. Each runtime rule judges a plan vLLM starts (and then runs wrong or slow), so vLLM's own
# start-up code (the dry engine) passes it; the reason says why nothing at start-up can see it. Every start-up rule
# (compat_rules.RULES) is visible at start-up. dry_compare uses this to compare the two verdicts honestly.
STARTUP_INVISIBLE: dict[str, str] = {
    "aiter mla verify length": "the verify length is routed per decode step in AITER MLA's metadata builder; "
    "start-up selects the backend and never sees a query length",
    "dflash prefix caching": "vLLM accepts prefix caching with DFlash and gives no warning; acceptance falls only "
    "as cache hits grow",
    "model runner": "a statement of which runner runs the plan, not a refusal; the dry engine reports the runner "
    "vLLM picks",
    "quantized drafter": "a weight-quantised drafter builds and loads; its output is wrong only when it runs",
    "graphs with spec decode": "capture sizes are used at graph capture and decode, after start-up; the PIECEWISE "
    "downgrade is logged, not raised",
    "synthetic acceptance": "vLLM's CPU sampler raises at the first request, not at start-up",
}
