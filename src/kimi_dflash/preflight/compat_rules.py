"""The compatibility rules: will this vLLM start this plan? Declarative, like the patch registry.

Every rule says why it exists, which vLLM source fact it reads (`reads`), and how to fix a failure. Its check
is a function over the deployment (platform, exact command line and environment, checkpoint facts) and the vLLM
source (read with `ast`, never imported, never judged by its version string). A rule returns findings:
pass / warn (cannot verify, or harmless) / fail (vLLM would not start, or would start and then break), each fail
with its fix, and each pass that holds only thanks to this project's vLLM plugin naming what it relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kimi_dflash.patcher import source_facts
from kimi_dflash.patcher.model import Status
from kimi_dflash.patcher.registry import PATCHES
from kimi_dflash.patcher.status import evaluate_all
from kimi_dflash.patcher.vllm_source import VllmSource
from kimi_dflash.preflight.deployment import Deployment
from kimi_dflash.preflight.plan_features import features_of
from kimi_dflash.preflight.results import CheckResult
from kimi_dflash.preflight.vllm_features import INTRODUCED_IN, FeatureOutcome, parse_feature, probe_features

PLUGIN = "the kimi_dflash vLLM plugin"


@dataclass(frozen=True)
class Finding(CheckResult):
    relies: tuple[str, ...] = ()  # what a pass depends on beyond vLLM itself (plugin patches, file patches)
    short: str = ""  # the reason in a few words, for the compatibility matrix


@dataclass(frozen=True)
class CompatRule:
    id: str
    title: str
    why: str
    reads: str  # the vLLM source fact(s) the check probes
    fix: str  # the general fix; findings carry the specific one
    check: Callable[[Deployment, VllmSource], list[Finding]]


def _pass(rule: str, detail: str, relies: tuple[str, ...] = ()) -> Finding:
    return Finding(rule, "pass", detail, None, relies)


def _warn(rule: str, detail: str, fix: str | None = None) -> Finding:
    return Finding(rule, "warn", detail, fix)


def _fail(rule: str, detail: str, fix: str, short: str) -> Finding:
    return Finding(rule, "fail", detail, fix, short=short)


def _label(source: VllmSource) -> str:
    return f"vLLM {source.version() or '(version unknown)'}"


def _introduced(feature: str) -> str:
    arrived = INTRODUCED_IN.get(feature)
    return f"use vLLM >= {arrived}" if arrived else "use a vLLM release that has it"


def _blame(deployment: Deployment, option: str) -> str:
    key = deployment.config_key(option)
    return f"{key} (sets {option})" if key else option


# --- presence: what the command line names must exist -------------------------------------------------


def _features(deployment: Deployment, source: VllmSource, kinds: set[str]) -> list[FeatureOutcome]:
    wanted = tuple(f for f in features_of(deployment.command) if parse_feature(f)[0] in kinds)
    return list(probe_features(source, wanted))


def _presence(
    rule: str, what: str, kinds: set[str], fix_for: Callable[[Deployment, FeatureOutcome], str]
) -> Callable[[Deployment, VllmSource], list[Finding]]:
    def check(deployment: Deployment, source: VllmSource) -> list[Finding]:
        outcomes = _features(deployment, source, kinds)
        findings = [
            _fail(
                rule,
                f"{o.name} is not in {_label(source)} ({o.evidence})",
                fix_for(deployment, o),
                o.name.split(":", 1)[-1],
            )
            for o in outcomes
            if o.state == "absent"
        ]
        findings += [_warn(rule, f"{o.name}: cannot verify, {o.evidence}") for o in outcomes if o.state == "unknown"]
        present = [o.name.split(":", 1)[-1] for o in outcomes if o.state == "present"]
        if present and not findings:
            findings.append(_pass(rule, f"all {len(present)} {what} exist in {_label(source)}"))
        return findings

    return check


def _option_fix(deployment: Deployment, outcome: FeatureOutcome) -> str:
    option = outcome.name.split(":", 1)[1]
    return f"remove {_blame(deployment, option)}, or {_introduced(outcome.name)}"


SPECULATIVE_KEY_FIXES = {
    "kv_cache_dtype": "DRAFT_KV_CACHE_DTYPE",
    "attention_backend": "DRAFT_ATTENTION_BACKEND",
    "draft_tensor_parallel_size": "DRAFT_TENSOR_PARALLEL_SIZE",
}


def _speculative_fix(deployment: Deployment, outcome: FeatureOutcome) -> str:
    key = outcome.name.split(".", 1)[1]
    if key == "kv_cache_dtype" and deployment.kv_cache_dtype.startswith("fp8"):
        # Without the key the drafter inherits the target's FP8 cache, with no scales of its own.
        return f"{_introduced(outcome.name)}: older releases give the DFlash drafter the target's FP8 KV cache"
    setting = SPECULATIVE_KEY_FIXES.get(key)
    unset = f"unset {setting} (it sends speculative_config.{key})" if setting else f"drop speculative_config.{key}"
    return f"{_introduced(outcome.name)}; or {unset}"


def _value_fix(deployment: Deployment, outcome: FeatureOutcome) -> str:
    kind, value = parse_feature(outcome.name)
    return f"use a {kind} this vLLM knows instead of {value!r} (see {outcome.evidence}), or {_introduced(outcome.name)}"


def _check_environment(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "environment"
    findings: list[Finding] = []
    outcomes = _features(deployment, source, {"env"})
    for outcome in outcomes:
        name = outcome.name.split(":", 1)[1]
        if outcome.state == "absent":
            findings.append(
                _warn(
                    rule,
                    f"{name} is not read by {_label(source)} (ignored)",
                    f"drop it, or {_introduced(outcome.name)}",
                )
            )
            continue
        choices = source_facts.env_choices(source, name)
        value = deployment.env.get(name, "")
        if choices is not None and value not in choices:
            findings.append(
                _fail(
                    rule,
                    f"{name}={value} is not one of {', '.join(choices)} (vllm/envs.py "
                    "env_with_choices raises at startup)",
                    f"set {name} to one of {', '.join(choices)}",
                    f"{name}={value}",
                )
            )
    if not findings and outcomes:
        findings.append(
            _pass(
                rule, f"{', '.join(o.name.split(':', 1)[1] for o in outcomes)} known to {_label(source)}, values valid"
            )
        )
    return findings


def _membership(
    rule: str, subject: str, wanted: tuple[str, ...], known: tuple[str, ...] | None, where: str, fix: str
) -> Finding:
    """pass when one of `wanted` is in `known` (a registry read from the source), fail when none is, warn when
    the registry was not found."""
    if known is None:
        return _warn(rule, f"{subject}: cannot verify, {where} not found")
    if not set(wanted) & set(known):
        return _fail(rule, f"{subject} is not in {where}", fix, subject)
    return _pass(rule, f"{subject} is registered")


def _check_registered(deployment: Deployment, source: VllmSource) -> list[Finding]:
    findings = []
    for option, registry in (("--tool-call-parser", "tool_parser"), ("--reasoning-parser", "reasoning_parser")):
        name = deployment.command.value(option)
        if name is not None:
            names = source_facts.registered(source, registry)
            findings.append(
                _membership(
                    "parsers",
                    f"{option} {name}",
                    (name,),
                    names,
                    f"{_label(source)}'s {registry} registry",
                    f"set {_blame(deployment, option)} to one of: {', '.join(sorted(names or ()))}",
                )
            )
    return findings


def _check_architectures(deployment: Deployment, source: VllmSource) -> list[Finding]:
    known = source_facts.model_architectures(source)
    return [
        _membership(
            "architectures",
            f"{facts.role} {facts.architectures[0]}",
            facts.architectures,
            known,
            f"{_label(source)}'s model registry ({source_facts.MODEL_REGISTRY})",
            "use a vLLM release that supports this model",
        )
        for facts in (deployment.target, deployment.drafter)
        if facts is not None and facts.architectures
    ]


# --- semantics: combinations vLLM accepts at parse time but fails on later -----------------------------


def _check_wna16_moe_backend(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "moe backend"
    target = deployment.target
    experts = None if target is None else target.wna16_experts
    backend = deployment.moe_backend
    if target is None:
        return [
            _warn(
                rule,
                "cannot check --moe-backend against the experts' quantisation: no checkpoint facts",
                "set MODEL_DIR to the downloaded checkpoint",
            )
        ]
    if experts is None:
        what = "are not WNA16-quantised" if target.routed_experts else "do not exist (no MoE layers)"
        return [_pass(rule, f"--moe-backend {backend}: the target's MoE experts {what}")]
    choice = source_facts.wna16_backend_choice(source, deployment.platform)
    if choice is None:
        return [
            _warn(
                rule,
                f"--moe-backend {backend}: cannot verify, no compressed-tensors WNA16 MoE method "
                f"found in {_label(source)}",
            )
        ]
    if backend == "auto":
        kernel = (
            "its WNA16 oracle picks the kernel" if choice.honours_moe_backend else "it runs vLLM's Triton WNA16 kernel"
        )
        return [_pass(rule, f"no --moe-backend: {choice.method} handles the experts; {kernel}")]
    if not choice.honours_moe_backend:
        return [
            _pass(
                rule,
                f"--moe-backend {backend} is ignored for these experts on {deployment.platform}: "
                f"{choice.method} never reads it (Triton WNA16 kernel); harmless here, but releases "
                "whose WNA16 oracle maps --moe-backend refuse values it does not list",
            )
        ]
    if backend in choice.accepted:
        return [_pass(rule, f"--moe-backend {backend} is accepted for WNA16 experts ({choice.method})")]
    return [
        _fail(
            rule,
            f"--moe-backend {backend}: {choice.method} passes it to select_wna16_moe_backend, whose "
            f"map_wna16_backend accepts only {', '.join(choice.accepted)} and raises ValueError "
            f"(\"moe_backend='{backend}' is not supported for WNA16 MoE\") while the model is built "
            f"- the checkpoint's experts are {experts.describe()}",
            f"set {_blame(deployment, '--moe-backend')} to auto (vLLM picks its WNA16 kernel; Triton on ROCm)"
            f"{' or triton' if 'triton' in choice.accepted else ''}",
            f"--moe-backend {backend} on WNA16 experts",
        )
    ]


def _check_mla_kv_dtype(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "kv cache dtype"
    dtype = deployment.kv_cache_dtype
    target = deployment.target
    if target is None or not target.mla or dtype == "auto":
        return []
    backends = source_facts.mla_backends(source, deployment.platform, deployment.aiter_mla)
    if not backends:
        return [
            _warn(
                rule,
                f"--kv-cache-dtype {dtype}: cannot verify, the {deployment.platform} platform's MLA "
                f"backend list was not found in {_label(source)}",
            )
        ]
    accepting = [b for b in backends if dtype in (source_facts.backend_kv_dtypes(source, b) or ())]
    union = sorted({d for b in backends for d in (source_facts.backend_kv_dtypes(source, b) or ())})
    if deployment.platform == "cpu" and not accepting:
        return [
            _fail(
                rule,
                f"--kv-cache-dtype {dtype} with an MLA model on the CPU build: the MLA backends "
                f"({', '.join(backends)}) take only {', '.join(union)}; the CPU selector does not "
                "check, so vLLM starts and dies at the first decode step",
                f"set {_blame(deployment, '--kv-cache-dtype')} to auto on CPU",
                f"MLA KV dtype {dtype}",
            )
        ]
    if not accepting:
        return [
            _fail(
                rule,
                f"--kv-cache-dtype {dtype}: none of the {deployment.platform} MLA backends "
                f'({", ".join(backends)}) supports it ("No valid attention backend found")',
                f"set {_blame(deployment, '--kv-cache-dtype')} to one of {', '.join(union)}",
                f"MLA KV dtype {dtype}",
            )
        ]
    return [_pass(rule, f"--kv-cache-dtype {dtype} is supported by MLA backend(s) {', '.join(accepting)}")]


def _check_patches(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "patches"
    texts = {path: source.text(f"vllm/{path}") for path in _patch_paths()}
    findings: list[Finding] = []
    done: list[str] = []
    unneeded: list[str] = []
    for state in evaluate_all(PATCHES, texts):
        patch = state.patch
        if state.status in (Status.RETIRED, Status.APPLIED):
            done.append(f"{patch.id} ({state.status.value})")
            continue
        if state.status is Status.UNRECOGNISED:
            findings.append(
                _fail(
                    rule,
                    f"{patch.id}: {state.detail} - the plugin refuses to start vLLM on a tree it does not recognise",
                    "use vLLM >= 0.20.0, or KIMI_DFLASH_PATCHES=off to start without the patches",
                    f"unrecognised {patch.id}",
                )
            )
            continue
        needed = None if patch.needed_when is None else patch.needed_when.holds(deployment, source)
        if needed is False:
            unneeded.append(f"{patch.id} - needed when {patch.needed_when}")
            continue
        why = f"needed: {patch.needed_when}" if needed else f"may be needed (facts unknown): {patch.needed_when}"
        if patch.runtime and _hooks_present(patch, source):
            findings.append(
                _pass(
                    rule,
                    f"{patch.id} pending in {_label(source)}, {why}; {PLUGIN} installs it at runtime",
                    relies=(f"plugin runtime patch {patch.id}",),
                )
            )
        elif patch.edits:
            findings.append(
                _pass(
                    rule,
                    f"{patch.id} pending, {why}; only a file patch fixes it (serve.sh writes it "
                    "on ROCm; the vLLM tree must be writable)",
                    relies=(f"file patch {patch.id}",),
                )
            )
        else:
            findings.append(
                _fail(
                    rule,
                    f"{patch.id} {why}, and this vLLM lacks the upstream fix (PR {patch.upstream_pr})",
                    f"use vLLM >= {patch.upstream_since}",
                    f"patch {patch.id}",
                )
            )
    summary = [f"nothing to do for {', '.join(done)}"] if done else []
    if unneeded:
        summary.append("pending in this vLLM but not needed by this plan:\n" + "\n".join(f"  {u}" for u in unneeded))
    if summary:
        findings.insert(0, _pass(rule, "; ".join(summary)))
    return findings


def _patch_paths() -> tuple[str, ...]:
    from kimi_dflash.patcher.registry import source_paths

    return source_paths()


def _hooks_present(patch: object, source: VllmSource) -> bool:
    hooks = getattr(patch, "runtime_hooks", ())
    return all((text := source.text(f"vllm/{probe.path}")) is not None and probe.matches(text) for probe in hooks)


def _check_kv_scale_hook(deployment: Deployment, source: VllmSource) -> list[Finding]:
    rule = "kv scale hook"
    mode = deployment.kv_scale_mode
    if mode == "off":
        return []
    points = source_facts.kv_write_hook_points(source)
    if points is None:
        return [
            _fail(
                rule,
                f"KV_SCALE_MODE={mode} needs MLAAttention in {source_facts.MLA_LAYER}, absent in {_label(source)}",
                "set KV_SCALE_MODE=off, or use vLLM 0.20-0.33",
                "KV-scale hook",
            )
        ]
    if not points:
        return [
            _fail(
                rule,
                f"KV_SCALE_MODE={mode}: MLAAttention no longer writes through "
                "impl.do_kv_cache_update, the method the hook wraps",
                "set KV_SCALE_MODE=off, or use vLLM 0.20-0.33",
                "KV-scale hook",
            )
        ]
    return [
        _pass(
            rule,
            f"KV_SCALE_MODE={mode}: MLAAttention writes latents through impl.do_kv_cache_update, which {PLUGIN} wraps",
            relies=(f"plugin FP8 KV-scale hook ({mode})",),
        )
    ]


RULES: tuple[CompatRule, ...] = (
    CompatRule(
        "options",
        "every `vllm serve` option exists",
        "vLLM's argument parser exits on an unknown option before anything loads.",
        "option strings in vllm/engine/arg_utils.py and the FrontendArgs fields (vllm/entrypoints/)",
        "remove the option or use a vLLM that has it",
        _presence("options", "options", {"cli"}, _option_fix),
    ),
    CompatRule(
        "speculative config",
        "every --speculative-config key is a SpeculativeConfig field",
        "SpeculativeConfig is a pydantic dataclass that forbids unknown keys: startup fails.",
        "SpeculativeConfig fields (vllm/config/speculative.py)",
        "unset the config key that sends it, or use the vLLM release that added it",
        _presence("speculative config", "speculative_config keys", {"speculative_config"}, _speculative_fix),
    ),
    CompatRule(
        "values",
        "every enumerated value is one vLLM knows",
        "Unknown Literal / enum values are rejected when the config is parsed.",
        "SpeculativeMethod, MoEBackend, CacheDType Literals (vllm/config/) and AttentionBackendEnum",
        "use a value the vLLM lists",
        _presence(
            "values", "values", {"speculative_method", "moe_backend", "kv_cache_dtype", "attention_backend"}, _value_fix
        ),
    ),
    CompatRule(
        "environment",
        "every VLLM_* variable is known, with a valid value",
        "Unknown variables are ignored (a silent no-op); env_with_choices variables raise on a bad value.",
        "environment_variables and env_with_choices(...) in vllm/envs.py",
        "drop the variable or set an accepted value",
        _check_environment,
    ),
    CompatRule(
        "parsers",
        "the tool-call and reasoning parsers are registered",
        "An unregistered parser name stops `vllm serve` at startup.",
        "_TOOL_PARSERS_TO_REGISTER / _REASONING_PARSERS_TO_REGISTER",
        "set a registered parser",
        _check_registered,
    ),
    CompatRule(
        "architectures",
        "target and drafter architectures are in vLLM's model registry",
        "An unsupported architecture fails before weights load.",
        "the _*_MODELS dicts in vllm/model_executor/models/registry.py",
        "use a release that supports the model",
        _check_architectures,
    ),
    CompatRule(
        "moe backend",
        "--moe-backend fits the checkpoint's expert quantisation",
        "Kimi K2.6's routed experts are compressed-tensors WNA16 (int4, group 32). From 0.27.0 (0.25.0 on "
        "CUDA) the WNA16 method hands --moe-backend to select_wna16_moe_backend, and map_wna16_backend "
        "raises ValueError for anything it does not list (aiter) while the model is being built; 0.20-0.26 "
        "on ROCm ignore the flag and always run the Triton WNA16 kernel.",
        "the WNA16 MoE method class (compressed_tensors_moe/), whether it calls select_wna16_moe_backend, "
        "and the `mapping` in map_wna16_backend (fused_moe/oracle/int_wna16.py)",
        "MOE_BACKEND=auto",
        _check_wna16_moe_backend,
    ),
    CompatRule(
        "kv cache dtype",
        "the target KV dtype is one of the platform's MLA backends' dtypes",
        "The selector needs an MLA backend whose supported_kv_cache_dtypes holds the dtype; the CPU "
        "selector does not check and the CPU MLA decode kernel then fails on FP8.",
        "the `if use_mla:` branch of vllm/platforms/<platform>.py and each backend's supported_kv_cache_dtypes",
        "KV_CACHE_DTYPE=auto or a listed dtype",
        _check_mla_kv_dtype,
    ),
    CompatRule(
        "patches",
        "the DFlash + MLA patches this plan needs are applied, retired or deliverable",
        "Pending patches whose needed_when holds for this plan must be delivered (plugin or file).",
        "the patch registry's probes and anchors (src/kimi_dflash/patcher/registry.py)",
        "install the plugin (pip install -e .), or use a vLLM with the upstream fixes",
        _check_patches,
    ),
    CompatRule(
        "kv scale hook",
        "the FP8 KV-scale hook finds its write path",
        "KV_SCALE_MODE != off relies on the plugin wrapping MLAAttention's impl.do_kv_cache_update.",
        "MLAAttention in vllm/model_executor/layers/attention/mla_attention.py",
        "KV_SCALE_MODE=off or a vLLM 0.20-0.33",
        _check_kv_scale_hook,
    ),
)
