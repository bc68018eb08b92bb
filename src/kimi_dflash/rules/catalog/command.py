"""What the command line names must exist: every `vllm serve` option, --speculative-config key and enumerated value,
every VLLM_* variable (with a valid value), the parsers and the model architectures. vLLM refuses each at start-up."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from kimi_dflash.config.schema import KEYS
from kimi_dflash.core.checks import CheckResult, failed, passed, warned
from kimi_dflash.rules.deployment import SPECULATIVE_VALUE_KINDS, Deployment
from kimi_dflash.rules.features import FeatureOutcome, introduced, parse_feature, probe_features
from kimi_dflash.rules.model import Check, Findings, Rule, label
from kimi_dflash.rules.source import VllmSource

ENVS = "vllm/envs.py"
MODEL_REGISTRY = "vllm/model_executor/models/registry.py"
PARSER_REGISTRIES = {  # option -> (registry, the dict vLLM registers its parsers in)
    "--tool-call-parser": ("tool_parser", "_TOOL_PARSERS_TO_REGISTER"),
    "--reasoning-parser": ("reasoning_parser", "_REASONING_PARSERS_TO_REGISTER"),
}
# --speculative-config keys the plan writes from a config key (config/schema.py), for the fix that names the key.
SPECULATIVE_KEYS = {key.speculative_field: key.name for key in KEYS if key.speculative_field}


def registered(source: VllmSource, name: str) -> tuple[str, ...] | None:
    module = source.find_module(name, "vllm/")
    return None if module is None else source.dict_keys(module, name)


def model_architectures(source: VllmSource) -> tuple[str, ...] | None:
    tree = source.tree(MODEL_REGISTRY)
    if tree is None:
        return None
    tables = [t.id for s in tree.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)]
    found = (source.dict_keys(MODEL_REGISTRY, name) or () for name in tables if name.endswith("_MODELS"))
    return tuple(dict.fromkeys(k for keys in found for k in keys))


def env_choices(source: VllmSource) -> dict[str, tuple[str, ...] | None]:
    """Each `env_with_choices(NAME, default, [choices])` declaration's choices (the first one of a name; None: no
    literal list of strings). One walk of vllm/envs.py for every variable a deployment sets."""
    tree = source.tree(ENVS)
    calls = (n for n in ast.walk(tree) if isinstance(n, ast.Call)) if tree is not None else ()
    declared: dict[str, tuple[str, ...] | None] = {}
    for args in (c.args for c in calls if ast.unparse(c.func).endswith("env_with_choices") and len(c.args) >= 3):
        if isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
            choices = args[2].elts if isinstance(args[2], (ast.List, ast.Tuple)) else []
            strings = (e.value for e in choices if isinstance(e, ast.Constant) and isinstance(e.value, str))
            declared.setdefault(args[0].value, tuple(strings) or None)
    return declared


def _features(deployment: Deployment, source: VllmSource, kinds: set[str]) -> list[FeatureOutcome]:
    wanted = tuple(f for f in deployment.command.features() if parse_feature(f)[0] in kinds)
    return list(probe_features(source, wanted))


def _presence(what: str, kinds: set[str], fix_for: Callable[[Deployment, FeatureOutcome], str]) -> Check:
    def check(deployment: Deployment, source: VllmSource) -> Findings:
        outcomes = _features(deployment, source, kinds)
        absent = (o for o in outcomes if o.state == "absent")
        findings = [
            failed(
                f"{o.name} is not in {label(source)} ({o.evidence})", fix_for(deployment, o), o.name.split(":", 1)[-1]
            )
            for o in absent
        ]
        findings += [warned(f"{o.name}: cannot verify, {o.evidence}") for o in outcomes if o.state == "unknown"]
        present = [o for o in outcomes if o.state == "present"]
        if present and not findings:
            findings.append(passed(f"all {len(present)} {what} exist in {label(source)}"))
        return findings

    return check


def _option_fix(deployment: Deployment, outcome: FeatureOutcome) -> str:
    return f"remove {deployment.blame(outcome.name.split(':', 1)[1])}, or {introduced(outcome.name)}"


def _speculative_fix(deployment: Deployment, outcome: FeatureOutcome) -> str:
    key = outcome.name.split(".", 1)[1]
    if key == "kv_cache_dtype" and deployment.kv_cache_dtype.startswith("fp8"):
        # Without the key the drafter inherits the target's FP8 cache, with no scales of its own.
        return f"{introduced(outcome.name)}: older releases give the DFlash drafter the target's FP8 KV cache"
    setting = SPECULATIVE_KEYS.get(key)
    unset = f"unset {setting} (it sends speculative_config.{key})" if setting else f"drop speculative_config.{key}"
    return f"{introduced(outcome.name)}; or {unset}"


def _value_fix(deployment: Deployment, outcome: FeatureOutcome) -> str:
    kind, value = parse_feature(outcome.name)
    return f"use a {kind} this vLLM knows instead of {value!r} (see {outcome.evidence}), or {introduced(outcome.name)}"


def _check_environment(deployment: Deployment, source: VllmSource) -> Findings:
    findings: list[CheckResult] = []
    outcomes = _features(deployment, source, {"env"})
    declared = env_choices(source) if outcomes else {}
    for outcome in outcomes:
        name = outcome.name.split(":", 1)[1]
        value = deployment.env.get(name, "")
        if outcome.state == "absent":
            fix = f"drop it, or {introduced(outcome.name)}"
            findings.append(warned(f"{name} is not read by {label(source)} (ignored)", fix))
        elif (choices := declared.get(name)) is not None and value not in choices:
            listed = ", ".join(choices)
            message = f"{name}={value} is not one of {listed} (vllm/envs.py env_with_choices raises at startup)"
            findings.append(failed(message, f"set {name} to one of {listed}", f"{name}={value}"))
    if not findings and outcomes:
        names = ", ".join(o.name.split(":", 1)[1] for o in outcomes)
        findings.append(passed(f"{names} known to {label(source)}, values valid"))
    return findings


def _membership(
    subject: str, wanted: tuple[str, ...], known: tuple[str, ...] | None, where: str, fix: str
) -> CheckResult:
    """Warn when the registry was not found in the source."""
    if known is None:
        return warned(f"{subject}: cannot verify, {where} not found")
    if not set(wanted) & set(known):
        return failed(f"{subject} is not in {where}", fix, subject)
    return passed(f"{subject} is registered")


def _check_parsers(deployment: Deployment, source: VllmSource) -> Iterator[CheckResult]:
    for option, (registry, definition) in PARSER_REGISTRIES.items():
        name = deployment.command.value(option)
        if name is not None:
            names = registered(source, definition)
            fix = f"set {deployment.blame(option)} to one of: {', '.join(sorted(names or ()))}"
            yield _membership(f"{option} {name}", (name,), names, f"{label(source)}'s {registry} registry", fix)


def _check_architectures(deployment: Deployment, source: VllmSource) -> Findings:
    known, where = model_architectures(source), f"{label(source)}'s model registry ({MODEL_REGISTRY})"
    fix = "use a vLLM release that supports this model"
    named = [f for f in (deployment.target, deployment.drafter) if f is not None and f.architectures]
    return [_membership(f"{f.role} {f.architectures[0]}", f.architectures, known, where, fix) for f in named]


VALUE_KINDS = set(SPECULATIVE_VALUE_KINDS.values())  # the kinds of enumerated values
RULES = (
    Rule(
        "options",
        "every `vllm serve` option exists",
        "vLLM's argument parser exits on an unknown option before anything loads.",
        "option strings in vllm/engine/arg_utils.py and the FrontendArgs fields (vllm/entrypoints/)",
        "remove the option or use a vLLM that has it",
        _presence("options", {"cli"}, _option_fix),
    ),
    Rule(
        "speculative config",
        "every --speculative-config key is a SpeculativeConfig field",
        "SpeculativeConfig is a pydantic dataclass that forbids unknown keys: startup fails.",
        "SpeculativeConfig fields (vllm/config/speculative.py)",
        "unset the config key that sends it, or use the vLLM release that added it",
        _presence("speculative_config keys", {"speculative_config"}, _speculative_fix),
    ),
    Rule(
        "values",
        "every enumerated value is one vLLM knows",
        "Unknown Literal / enum values are rejected when the config is parsed.",
        "SpeculativeMethod, MoEBackend, CacheDType Literals (vllm/config/) and AttentionBackendEnum",
        "use a value the vLLM lists",
        _presence("values", VALUE_KINDS, _value_fix),
    ),
    Rule(
        "environment",
        "every VLLM_* variable is known, with a valid value",
        "Unknown variables are ignored (a silent no-op); env_with_choices variables raise on a bad value.",
        "environment_variables and env_with_choices(...) in vllm/envs.py",
        "drop the variable or set an accepted value",
        _check_environment,
    ),
    Rule(
        "parsers",
        "the tool-call and reasoning parsers are registered",
        "An unregistered parser name stops `vllm serve` at startup.",
        "_TOOL_PARSERS_TO_REGISTER / _REASONING_PARSERS_TO_REGISTER",
        "set a registered parser",
        _check_parsers,
    ),
    Rule(
        "architectures",
        "target and drafter architectures are in vLLM's model registry",
        "An unsupported architecture fails before weights load.",
        "the _*_MODELS dicts in vllm/model_executor/models/registry.py",
        "use a release that supports the model",
        _check_architectures,
    ),
)
