"""Which model runner (V1/V2) runs the plan, and whether the KV-scale hook acts on it: a statement more than a
refusal."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kimi_dflash.core.checks import failed, passed, warned
from kimi_dflash.patcher import floor
from kimi_dflash.rules.deployment import TRUE_WORDS, Deployment
from kimi_dflash.rules.model import Fact, Findings, Rule, label
from kimi_dflash.rules.source import SourceLine, VllmSource

RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
VLLM_CONFIG = "vllm/config/vllm.py"
ENVS = "vllm/envs.py"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"


@dataclass(frozen=True)
class RunnerChoice:
    runner: str  # "V1" or "V2"
    why: str
    where: SourceLine


def model_runner(
    source: VllmSource,
    *,
    platform: str,
    method: str | None,
    moe: bool,
    quantized: bool,
    env_value: str | None,
    architectures: tuple[str, ...] = (),
) -> RunnerChoice | None:
    """The runner `VllmConfig.use_v2_model_runner` gives the plan, branch by branch: the VLLM_USE_V2_MODEL_RUNNER
    override; `_is_default_v2_model_runner_model` (0.22-0.28: MoE or quantised models stay on V1); `HAS_TRITON` (not
    on the CPU build); `_get_v2_model_runner_unsupported_features`. 0.20-0.21: the variable alone, default V1."""
    prop = source.function(VLLM_CONFIG, "VllmConfig.use_v2_model_runner")
    override = None if not (env_value or "").strip() else (env_value or "").strip().lower() in TRUE_WORDS
    if prop is None:
        variable = source.line_of(ENVS, f'"{RUNNER_ENV}"')
        if variable is None and RUNNER_ENV not in (source.text(ENVS) or ""):
            return None
        why = RUNNER_ENV + (f"={env_value}" if env_value else " unset (default 0)")
        return RunnerChoice("V2" if override else "V1", why, variable or SourceLine(ENVS, None))
    where = SourceLine(VLLM_CONFIG, prop.lineno)
    body = ast.unparse(prop)
    if override is not None:
        return RunnerChoice("V2" if override else "V1", f"{RUNNER_ENV}={env_value}", where)
    if "_is_default_v2_model_runner_model" in body:
        gate = source.function(VLLM_CONFIG, "VllmConfig._is_default_v2_model_runner_model")
        gate_text = "" if gate is None else ast.unparse(gate)
        if moe and "is_moe" in gate_text:
            return RunnerChoice("V1", "MoE models are not default-V2 (_is_default_v2_model_runner_model)", where)
        if quantized and "is_quantized" in gate_text:
            return RunnerChoice("V1", "quantised models are not default-V2 (_is_default_v2_model_runner_model)", where)
        default_v2 = source.assigned_strings(VLLM_CONFIG, "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES")
        if "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES" in gate_text and not set(architectures) & set(default_v2):
            return RunnerChoice("V1", "the architecture is not in DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES", where)
    if "HAS_TRITON" in body and platform == "cpu":
        return RunnerChoice("V1", "no Triton on the CPU build (HAS_TRITON false)", where)
    unsupported = source.function(VLLM_CONFIG, "VllmConfig._get_v2_model_runner_unsupported_features")
    if method is not None and unsupported is not None and _method_unsupported(unsupported, method):
        return RunnerChoice("V1", f"V2 does not support speculative method {method!r} in this release", where)
    return RunnerChoice("V2", "Triton present and nothing in the plan is on V2's unsupported list", where)


def _method_unsupported(function: ast.FunctionDef, method: str) -> bool:
    """`speculative_config.method in (...)` / `not in (...)` tests whose body appends to `unsupported`."""
    for node in (n for n in ast.walk(function) if isinstance(n, ast.If)):
        appends = any("unsupported.append" in ast.unparse(s) for s in node.body)
        if not appends or "parallel_drafting" in ast.unparse(node.test):  # a P-EAGLE feature, not the method
            continue
        for test in ast.walk(node.test):
            listed = test.comparators[0] if isinstance(test, ast.Compare) and len(test.ops) == 1 else None
            if isinstance(listed, (ast.Tuple, ast.List, ast.Set)) and ast.unparse(test.left).endswith(".method"):
                names = {e.value for e in listed.elts if isinstance(e, ast.Constant)}
                op = test.ops[0]
                if (isinstance(op, ast.In) and method in names) or (isinstance(op, ast.NotIn) and method not in names):
                    return True
    return False


def v2_builds_model_layers(source: VllmSource) -> SourceLine | None:
    """Where the V2 runner builds its model through vLLM's model loader (the MLAAttention the KV-scale hook wraps)."""
    return source.line_of(V2_RUNNER, "get_model(", "get_model_loader(")


def runner_choice(deployment: Deployment, source: VllmSource) -> RunnerChoice | None:
    target = deployment.target
    return model_runner(
        source,
        platform=deployment.platform,
        method=deployment.speculative_method,
        moe=bool(target and target.routed_experts),
        quantized=bool(target and (target.quantization or target.wna16_experts)),
        env_value=deployment.env.get(RUNNER_ENV),
        architectures=() if target is None else target.architectures,
    )


def _runner_cell(source: VllmSource, deployment: Deployment) -> str:
    runner = runner_choice(deployment, source)
    return "?" if runner is None else f"{runner.runner} ({runner.why}; `{runner.where}`)"


def _check_model_runner(deployment: Deployment, source: VllmSource) -> Findings:
    choice = runner_choice(deployment, source)
    if choice is None:
        return warned(f"cannot tell which model runner {label(source)} picks: no use_v2_model_runner found")
    detail = f"{label(source)} runs this plan on Model Runner {choice.runner}: {choice.why} ({choice.where})"
    if choice.runner == "V2" and deployment.kv_scale_mode != "off":
        built = v2_builds_model_layers(source)
        if built is None:
            return failed(
                detail + f"; KV_SCALE_MODE={deployment.kv_scale_mode} but the V2 runner's model construction was "
                f"not found ({V2_RUNNER}), so the KV-scale hook cannot be shown to act on it",
                f"set {RUNNER_ENV}=0 in the environment, or KV_SCALE_MODE=off",
                "KV-scale hook on V2",
            )
        detail += (
            "; the KV-scale hook wraps the model's MLAAttention layers, which V2 builds through vLLM's model loader "
            f"like V1 ({built})"
        )
    if deployment.platform == "cpu" and choice.runner == "V1":
        detail += "; GPU builds of the same release may run V2 (the CPU demo exercises V1 only)"
    return passed(detail)


V2_DFLASH = "vllm/v1/worker/gpu/spec_decode/dflash/"


def _check_dflash_on_v2(deployment: Deployment, source: VllmSource) -> Findings:
    choice = runner_choice(deployment, source) if deployment.dflash else None
    if choice is None or choice.runner != "V2":
        return []
    if floor.holds(source.text(f"vllm/{floor.PATH}")):  # 0.26.0 on, past the releases where it collapsed
        return passed(f"{label(source)} is past 0.25.1, where DFlash on V2 lost its acceptance (vllm #49559)")
    first = next(source.paths(V2_DFLASH), None)
    return warned(
        f"DFlash on Model Runner V2 in {label(source)} ({first or V2_DFLASH}): in 0.24.0-0.25.1, the releases "
        "with V2's first DFlash speculator, acceptance fell to ~0 on V2 and was normal on V1 (vllm #49559)",
        f"{RUNNER_ENV}=0 (V1), or vLLM >= {floor.RELEASE}; confirm acceptance by position",
    )


RULES = (
    Rule(
        "model runner",
        "which model runner (V1/V2) the plan gets, and whether the KV-scale hook acts on it",
        "GPU builds of 0.29+ run Kimi + DFlash on Model Runner V2; the CPU build (no Triton) runs V1, so the demo "
        "and CI exercise another path than production.",
        "VllmConfig.use_v2_model_runner and the functions it calls (config/vllm.py); the V2 runner's model "
        "construction (v1/worker/gpu/model_runner.py)",
        "VLLM_USE_V2_MODEL_RUNNER=0 pins V1",
        _check_model_runner,
        silent_at_startup="a statement of which runner runs the plan, not a refusal; the dry engine reports the "
        "runner vLLM picks",
        facts=(Fact("model runner for `production` (ROCm, Triton)", _runner_cell),),
    ),
    Rule(
        "dflash on runner v2",
        "DFlash on Model Runner V2 outside the releases where its acceptance collapsed",
        "In 0.24.0-0.25.1 (V2's first DFlash speculator) DFlash drafts on V2 were accepted ~0 % of the time while V1 "
        "was normal.",
        "the runner choice (model runner rule), v1/worker/gpu/spec_decode/dflash/ and the patch floor's probe",
        f"VLLM_USE_V2_MODEL_RUNNER=0 or vLLM >= {floor.RELEASE}",
        _check_dflash_on_v2,
        silent_at_startup="the plan starts on V2 and serves the target's output; only the acceptance rate shows it",
        upstream=("vllm #49559 (open)", "vllm #46435"),
    ),
)
