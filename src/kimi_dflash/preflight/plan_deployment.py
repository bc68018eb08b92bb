"""A launch plan as the compatibility rules see it: the Deployment that serve.sh's preflight, `--check-vllm` and
the compatibility matrix judge (one builder, so all three judge the same thing)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kimi_dflash.config.loader import display_path
from kimi_dflash.config.validate import Config
from kimi_dflash.plan import OPTION_KEYS, LaunchPlan
from kimi_dflash.preflight.deployment import Deployment, deployment_from_command


def deployment_for_plan(config: Config, plan: LaunchPlan, inherited_env: Mapping[str, str] | None = None) -> Deployment:
    """The plan as the compatibility rules see it. `inherited_env`: the environment vLLM will also inherit
    (preflight passes os.environ; --check-vllm and the matrix judge the plan alone)."""
    demo = config.demo_models is not None  # fabricated models: never the shipped Kimi facts
    model_dir, draft_dir = config.typed.model_dir, config.typed.draft_model_dir
    return deployment_from_command(
        config.typed.device,
        plan.argv,
        {**(inherited_env or {}), **plan.env},
        model_dir=None if model_dir is None else Path(str(model_dir)),
        model_repo=None if demo else config.typed.model_repo,
        drafter_dir=None if draft_dir is None else Path(str(draft_dir)),
        drafter_repo=None if demo else config.typed.draft_model_repo,
        label=display_path(config.path),
        extra_args=config.typed.extra_vllm_args,
        option_keys=OPTION_KEYS,
    )
