"""How deep to speculate: by load (whether vLLM follows `num_speculative_tokens_per_batch_size` for the plan) and by
context (DFlash's loss at long context); each rule's `why` has the facts."""

from __future__ import annotations

from dataclasses import dataclass

from kimi_dflash.config.schema import KEY
from kimi_dflash.core.checks import failed, passed, warned
from kimi_dflash.rules.catalog.model_runner import RUNNER_ENV, V2_RUNNER, VLLM_CONFIG, runner_choice
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Fact, Findings, Rule, label
from kimi_dflash.rules.source import SourceLine, VllmSource

SCHEDULE = "num_speculative_tokens_per_batch_size"
PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"
LOSS_CONTEXT = 185_000  # vllm #54691: DFlash measured slower than no speculation near this context length


@dataclass(frozen=True)
class ScheduleFacts:
    lookup: SourceLine  # the scheduler's batch size -> k table (v1/spec_decode/dynamic/utils.py, 0.24+)
    v1: SourceLine | None  # V1's drafter takes the scheduled k (SpecDecodeBaseProposer.propose)
    v2: SourceLine | None  # the V2 runner reads the scheduled k (0.32+); None: it never does
    v2_blanks: SourceLine | None  # V2 blanks drafts past the scheduled k (DFlash drafts its whole block)
    dp_off: SourceLine | None  # turned off under data parallel (0.26+); None: no guard
    piecewise: SourceLine | None  # V1: FULL graphs downgraded to PIECEWISE


def schedule_facts(source: VllmSource) -> ScheduleFacts | None:
    lookup = source.line_of("vllm/v1/spec_decode/dynamic/utils.py", "def build_dynamic_sd_schedule_lookup")
    if lookup is None:
        return None
    return ScheduleFacts(
        lookup,
        source.line_of(PROPOSER, "self.num_speculative_tokens = num_speculative_tokens"),
        source.line_of(V2_RUNNER, "num_spec_tokens_to_schedule"),
        source.line_of(V2_RUNNER, "num_spec_tokens < self.num_speculative_steps"),
        source.line_of(VLLM_CONFIG, "def _maybe_disable_dynamic_sd_for_data_parallel"),
        source.line_of(VLLM_CONFIG, "def _maybe_override_dynamic_sd_cudagraph_mode"),
    )


def scheduled_depths(deployment: Deployment) -> tuple[int, ...]:
    """Every k a verify step can have: NUM_SPECULATIVE_TOKENS and each scheduled k (clamped to it, as vLLM does)."""
    k, schedule = deployment.num_speculative_tokens, deployment.speculative.get(SCHEDULE)
    entries = schedule if isinstance(schedule, list) else []
    scheduled = {int(e[2]) for e in entries if isinstance(e, list) and len(e) == 3 and str(e[2]).isdigit()}
    return () if k is None else tuple(sorted({k, *(min(k, s) for s in scheduled)}))


def _cell(source: VllmSource, _deployment: Deployment) -> str:
    facts = schedule_facts(source)
    if facts is None:
        return "absent"
    v2 = f"`{facts.v2}`" if facts.v2 else "ignored"
    return f"V1 `{facts.v1}`; V2 {v2}; data parallel: {'off' if facts.dp_off else 'no guard'}"


def _check_schedule(deployment: Deployment, source: VllmSource) -> Findings:
    facts = schedule_facts(source) if SCHEDULE in deployment.speculative else None
    if facts is None:  # unset, or a release without the field: the command rule refuses it, naming 0.24.0
        return []
    key, dp = KEY.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE, deployment.command.value("--data-parallel-size") or "1"
    if dp.isdigit() and int(dp) > 1:
        effect = "this release has no guard: ranks may pick different k and diverge or deadlock (0.26.0's guard)"
        if facts.dp_off:
            effect = f"vLLM turns the schedule off ({facts.dp_off}) and drafts NUM_SPECULATIVE_TOKENS at every load"
        fix = f"unset {key}, or serve without data parallelism"
        return failed(f"{SCHEDULE} with --data-parallel-size {dp}: {effect}", fix, "depth by load under DP")
    choice = runner_choice(deployment, source)
    if choice is not None and choice.runner == "V2":
        if facts.v2 is None:
            return failed(
                f"{label(source)} runs this plan on Model Runner V2 ({choice.why}), whose runner never reads the "
                f"scheduled k ({V2_RUNNER}): the schedule is ignored, every step verifies NUM_SPECULATIVE_TOKENS",
                f"{RUNNER_ENV}=0 in the environment (V1 follows the schedule), or vLLM >= 0.32.0",
                "depth by load ignored on V2",
            )
        detail = f"Model Runner V2 reads the scheduled k ({facts.v2})"
        if deployment.speculative_method in ("dflash", "dspark"):
            detail += (
                f"; the {deployment.speculative_method} speculator drafts its whole block and the runner blanks the "
                f"drafts past k ({facts.v2_blanks}): verification follows the schedule, the drafter's cost does not"
            )
    elif facts.v1 is None:
        return warned(f"cannot find where {label(source)}'s V1 drafter takes the scheduled k")
    else:
        detail = f"Model Runner V1 hands the scheduled k to the drafter ({facts.v1})"
    findings = [passed(f"{label(source)} looks k up by batch size ({facts.lookup}); {detail}")]
    graphs = deployment.platform != "cpu" and not deployment.command.flag("--enforce-eager")
    if graphs and (choice is None or choice.runner == "V1") and facts.piecewise:
        piecewise = (
            f"with a schedule on Model Runner V1, vLLM turns FULL CUDA graphs into PIECEWISE ({facts.piecewise})"
        )
        fix = f"compare with the fixed-k plan under graphs, or {RUNNER_ENV}=1 (V2 keeps FULL graphs)"
        findings.append(warned(piecewise, fix))
    return findings


def context_knobs(source: VllmSource) -> tuple[str, ...]:
    """SpeculativeConfig fields that name a context length (none in 0.20-0.33; RFC #48627 proposes one)."""
    module = source.find_module("SpeculativeConfig", "vllm/config/")
    fields = (source.class_fields(module, "SpeculativeConfig") or ()) if module else ()
    return tuple(f for f in fields if "context" in f)


def _check_long_context(deployment: Deployment, source: VllmSource) -> Findings:
    length = deployment.command.value("--max-model-len") or ""
    if not deployment.dflash or not length.isdigit():
        return []
    if int(length) < LOSS_CONTEXT:
        return passed(f"--max-model-len {length} stays below ~{LOSS_CONTEXT}, where DFlash turns into a loss")
    offer = "has no setting that stops speculation by context length (its speculative max_model_len only sizes"
    offer += " the drafter)"
    if knobs := context_knobs(source):
        offer = f"SpeculativeConfig offers {', '.join(knobs)}: see whether it stops speculation past a length"
    return warned(
        f"MAX_MODEL_LEN={length} admits prompts past ~{LOSS_CONTEXT} tokens, where DFlash was measured slower than "
        f"no speculation (vllm #54691); {label(source)} {offer}",
        f"serve prompts past ~{LOSS_CONTEXT} from a SPECULATIVE_METHOD=none server (MAX_MODEL_LEN below it here), "
        "or measure the loss with long prompts",
    )


RULES = (
    Rule(
        "depth by load",
        "vLLM follows NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE for this plan",
        "The scheduler picks k per step from the batch size (0.24+). Model Runner V1 drafts that k; V2 reads it only "
        "from 0.32.0 (before, the schedule is silently ignored). vLLM turns it off under data parallel (0.26+; "
        "before, ranks could diverge) and downgrades FULL graphs to PIECEWISE on V1.",
        "build_dynamic_sd_schedule_lookup (v1/spec_decode/dynamic/utils.py), SpecDecodeBaseProposer.propose, the V2 "
        "runner's num_spec_tokens_to_schedule, VllmConfig's dynamic-SD data-parallel and cudagraph overrides",
        "VLLM_USE_V2_MODEL_RUNNER=0 or vLLM >= 0.32.0; no data parallelism",
        _check_schedule,
        silent_at_startup="vLLM starts the plan and drafts NUM_SPECULATIVE_TOKENS; only the per-step k shows it",
        upstream=("vllm #32374",),
        facts=(Fact("depth by load: who reads the scheduled k", _cell),),
    ),
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
