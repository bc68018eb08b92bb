"""What a validated config still needs from this machine before its plan is built (the fabricated demo models'
paths, the libraries to preload into vLLM's CPU build), then the plan for this machine. Shared by every server
start (serve.sh, the lab's in-process starter) and by the pre-shard tool, which runs vLLM in-process from the same
config."""

from __future__ import annotations

import sys
from collections.abc import Callable

from kimi_dflash.config.validate import Config
from kimi_dflash.core.paths import cache_root
from kimi_dflash.plan import LaunchPlan, build_plan


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def resolve_demo_models(config: Config, create: bool, say: Callable[[str], None] = _stderr) -> Config:
    """Point MODEL_DIR / DRAFT_MODEL_DIR at the fabricated demo models (building them when `create`)."""
    if config.demo_models is None:
        return config
    from kimi_dflash import demo

    if create:
        models = demo.ensure_demo_models(choice=config.demo_models, progress=say)
    else:
        models = demo.demo_model_paths(choice=config.demo_models)
    return config.with_values("fabricated demo", MODEL_DIR=models.target_dir, DRAFT_MODEL_DIR=models.drafter_dir)


def cpu_preload(config: Config, say: Callable[[str], None] = _stderr) -> tuple[str, ...]:
    """What LD_PRELOAD should hold for vLLM's CPU build on this machine (and say what was found)."""
    if config.typed.device != "cpu" or not config.typed.cpu_preload_libs:
        return ()
    from kimi_dflash.launch import cpu_libs

    libraries = cpu_libs.cpu_preload_libraries()
    say(cpu_libs.describe(libraries))
    return cpu_libs.merged_ld_preload(libraries)


def local_plan(config: Config) -> LaunchPlan:
    """The plan for starting ``config`` on this machine: this interpreter, the project cache, the CPU preloads."""
    return build_plan(
        config, python_executable=sys.executable, cache_dir=str(cache_root()), cpu_preload=cpu_preload(config)
    )
