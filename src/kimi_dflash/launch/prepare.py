"""One way from a validated config to what a start serves: demo model paths, checkpoint facts, the plan, the verdict
of the serving vLLM (read from source) and its remedies applied. serve, check-vllm, qualify, the image's patch step
and the lab all go through `prepare`, so each judges what serve serves."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kimi_dflash.checkpoint import Facts, read_facts
from kimi_dflash.config.validate import Config, check_paths
from kimi_dflash.core.paths import cache_root
from kimi_dflash.launch import drafter_rope
from kimi_dflash.plan import LaunchPlan, build_plan

if TYPE_CHECKING:
    from kimi_dflash.config.problems import Problem
    from kimi_dflash.rules.deployment import Deployment
    from kimi_dflash.rules.engine import Verdict
    from kimi_dflash.rules.source import VllmSource

Say = Callable[[str], None]
EXPECTED_ARCH = {"rocm": "gfx942", "cuda": "sm_90"}  # the architectures the recipe was built and measured on


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def serving_source(plan: LaunchPlan) -> VllmSource | None:
    from kimi_dflash.preflight.runtime_probe import interpreter_for_command
    from kimi_dflash.rules.source import VllmSource

    return VllmSource.installed(interpreter_for_command(plan.argv))


@dataclass(frozen=True)
class Prepared:
    """What a start serves, judged; it checks the machine (preflight) and writes the file patches (patch) for it."""

    config: Config  # as served: the demo models' paths and the remedies' values in
    facts: Facts  # the checkpoints', the drafter's at its overlay when one is served
    plan: LaunchPlan
    deployment: Deployment
    verdict: Verdict | None  # of the served plan; None: no vLLM to read (the plan as configured, nothing remedied)
    problems: tuple[Problem, ...] = ()  # the files the config as given names (config/rules.py path_problems)
    seconds: Mapping[str, float] = field(default_factory=dict, compare=False)  # where prepare's time went

    def preflight(self, fix_numa: bool, say: Say, starting: bool = False) -> bool:
        """`starting`: vLLM starts next and imports vllm itself, first thing: the probe imports only torch, on a GPU."""
        from kimi_dflash.core.checks import exit_code, render
        from kimi_dflash.preflight.request import PreflightRequest
        from kimi_dflash.preflight.run import run_preflight
        from kimi_dflash.preflight.runtime_probe import interpreter_for_command

        typed, plan = self.config.typed, self.plan
        request = PreflightRequest(
            device=typed.device,  # type: ignore[arg-type]
            tensor_parallel_size=typed.tensor_parallel_size if typed.device != "cpu" else 1,
            expected_arch=EXPECTED_ARCH.get(typed.device),
            model_dir=typed.model_dir,
            draft_model_dir=typed.draft_model_dir if typed.speculative else None,
            model_repo_hint=str(typed.model_repo),
            draft_repo_hint=str(typed.draft_model_repo),
            host=plan.host,
            port=plan.port,
            deployment=self.deployment,
            verdict=self.verdict,
            python=interpreter_for_command(plan.argv),
            fix_numa=fix_numa,
            preshard_dir=typed.preshard_dir,
            dtype=typed.dtype,
            imports=("torch",) * (typed.device != "cpu") if starting else ("vllm", "torch"),
        )
        results = run_preflight(request)
        say(render(results))
        return exit_code(results) == 0

    def patch(self, say: Say, vllm_root: Path | None = None) -> bool:
        """Report the patch status of the vLLM that will run; on ROCm write the pending file patches the remedies name.
        At or above the patch floor (patcher/floor.py) the patcher is not loaded."""
        from kimi_dflash.patcher import floor

        on_rocm = self.deployment.platform == "rocm"
        judged = self.verdict and Path(self.verdict.vllm_origin)  # the serving Python's vLLM
        if (root := floor.package_dir(vllm_root or judged)) is not None and floor.package_at_floor(root):
            say(f"patches: vLLM at {root} is {floor.describe()}: nothing to check or write")
            return True
        from kimi_dflash.patcher.engine import EXIT_UNRECOGNISED, apply_pending, status_table
        from kimi_dflash.patcher.model import PatcherError, Status
        from kimi_dflash.rules.engine import judge
        from kimi_dflash.rules.source import VllmSource

        try:
            table = status_table(root)
            say(table.to_text())
            if not on_rocm:
                return True
            if table.exit_code == EXIT_UNRECOGNISED:
                say("patches: this vLLM tree is not one the patcher recognises; refusing to start on ROCm")
                return False
            pending = {s.patch.id for s in table.states if s.status is Status.PENDING}
            if (verdict := self.verdict) is None or verdict.vllm_origin != str(table.root):
                verdict = judge(self.deployment, VllmSource.open(table.root))
            if needed := [r.name for r in verdict.remedies("file patch") if r.name in pending]:
                say(f"patches: writing the file patch(es) this plan needs: {', '.join(needed)}")
                say(apply_pending(table.root, only=needed).after.to_text())
            elif table.exit_code == 1:
                say(
                    "patches: nothing to write for this plan (pending patches are not needed, or the plugin "
                    "installs them at runtime)"
                )
        except PatcherError as exc:
            say(f"patches: {exc}")
            return not on_rocm
        return True


def resolve_demo_models(config: Config, create: bool, say: Say = _stderr) -> Config:
    if config.demo_models is None:
        return config
    from kimi_dflash import demo

    if create:
        models = demo.ensure_demo_models(choice=config.demo_models, progress=say)
    else:
        models = demo.demo_model_paths(choice=config.demo_models)
    return config.with_values("fabricated demo", MODEL_DIR=models.target_dir, DRAFT_MODEL_DIR=models.drafter_dir)


def cpu_preload(config: Config, say: Say = _stderr) -> tuple[str, ...]:
    """What LD_PRELOAD should hold for vLLM's CPU build on this machine (and say what was found)."""
    if config.typed.device != "cpu" or not config.typed.cpu_preload_libs:
        return ()
    from kimi_dflash.launch import cpu_libs

    libraries = cpu_libs.cpu_preload_libraries()
    say(cpu_libs.describe(libraries))
    merged = cpu_libs.merged_ld_preload(libraries)
    if left_out := [str(path) for path in libraries if str(path) not in merged]:
        say(f"CPU preload: {', '.join(left_out)} left out: LD_PRELOAD holds another OpenMP runtime")
    return merged


def prepare(
    config: Config,
    environ: Mapping[str, str] | None = None,
    *,
    source: Callable[[LaunchPlan], VllmSource | None] = serving_source,
    create: bool = False,
    say: Say = _stderr,
) -> Prepared:
    """`environ`: what vLLM inherits; `source`: the vLLM to judge with, given the plan (default: its Python's);
    `create`: fabricate the demo models and build the drafter's overlay (a start), else only name them (a check)."""
    from kimi_dflash.rules.deployment import Deployment
    from kimi_dflash.rules.engine import judge

    environ, seconds, clock = os.environ if environ is None else environ, {}, time.monotonic()

    def lap(stage: str) -> None:  # the seconds since the last lap are this stage's
        nonlocal clock
        seconds[stage], clock = time.monotonic() - clock, time.monotonic()

    def planned(config: Config, facts: Facts, env: Mapping[str, str]) -> tuple[LaunchPlan, Deployment]:
        plan = build_plan(config, sys.executable, str(cache_root()), preload, environ, env)
        return plan, Deployment.for_plan(config, plan, facts, environ)

    config = resolve_demo_models(config, create, say)
    lap("demo models")
    facts = read_facts(config.typed)
    problems = tuple(check_paths(config, facts))
    drafter_rope.note_unreadable(facts, config.typed, say)
    lap("facts")
    preload = cpu_preload(config, say)
    plan, deployment = planned(config, facts, {})
    lap("plan")
    vllm = source(plan)
    verdict = None if vllm is None else judge(deployment, vllm)
    lap("verdict")
    if vllm is None:
        say("vLLM: none found for this plan's Python: not judged; served as configured, no rule's remedy applied")
    elif verdict and verdict.remedies("config", "env", "overlay"):
        remedied, facts, env = _remedied(config, facts, verdict, create, say)
        if remedied is not config or env:  # else only relied on (an overlay for shipped facts): judged as it is
            config, (plan, deployment) = remedied, planned(remedied, facts, env)
            verdict = judge(deployment, vllm)
        lap("remedies")
    return Prepared(config, facts, plan, deployment, verdict, problems, seconds)


def _remedied(config: Config, facts: Facts, verdict: Verdict, create: bool, say: Say) -> tuple[Config, Facts, dict]:
    """The config, facts and environment with the launcher's remedies of each finding applied."""
    env: dict[str, str] = {}
    for finding, remedy in ((f, r) for f in verdict.findings for r in f.relies):
        if remedy.kind == "config":
            config = config.with_values(f"rule {finding.name}", **{remedy.name: remedy.value})
        elif remedy.kind == "env":
            env[remedy.name] = str(remedy.value)
        elif remedy.kind == "overlay" and remedy.value is not None:
            facts = drafter_rope.apply(facts, remedy.value, cache_root(), create, say)  # type: ignore[arg-type]
            if facts.drafter is not None and facts.drafter.overlay is not None:
                config = config.with_values(f"rule {finding.name}", DRAFT_MODEL_DIR=facts.drafter.directory)
    return config, facts, env
