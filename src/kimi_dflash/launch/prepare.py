"""What a validated config still needs from this machine (demo model paths, CPU preloads, flashinfer on CUDA), then
the plan for this machine. Shared by every server start (serve.sh, the lab's starter) and the pre-sharder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

from kimi_dflash.checkpoint import Facts, read_facts
from kimi_dflash.config.validate import Config
from kimi_dflash.core.paths import cache_root
from kimi_dflash.plan import LaunchPlan, build_plan

Say = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def resolve_demo_models(config: Config, create: bool, say: Say = _stderr) -> Config:
    if config.demo_models is None:
        return config
    from kimi_dflash import demo

    if create:
        models = demo.ensure_demo_models(choice=config.demo_models, progress=say)
    else:
        models = demo.demo_model_paths(choice=config.demo_models)
    return config.with_values("fabricated demo", MODEL_DIR=models.target_dir, DRAFT_MODEL_DIR=models.drafter_dir)


def resolve_drafter_rope(config: Config, facts: Facts, create: bool, say: Say = _stderr) -> tuple[Config, Facts]:
    """DRAFT_MODEL_DIR and the drafter's facts at the RoPE overlay DRAFTER_ROPE_AMPLITUDE needs (drafter_rope.py)."""
    drafter_dir = config.typed.draft_model_dir
    if config.typed.speculative_method != "dflash" or drafter_dir is None:
        return config, facts
    from kimi_dflash.launch import drafter_rope

    served = drafter_rope.resolve(facts, drafter_dir, config.typed.drafter_rope_choice, cache_root(), create, say)
    if served is facts or served.drafter is None:  # the drafter as it is
        return config, facts
    return config.with_values("drafter RoPE amplitude", DRAFT_MODEL_DIR=served.drafter.directory), served


def resolve_models(config: Config, create: bool, say: Say = _stderr) -> tuple[Config, Facts]:
    """The demo models' paths, the checkpoints' facts (read once, here) and the drafter's RoPE overlay."""
    config = resolve_demo_models(config, create, say)
    return resolve_drafter_rope(config, read_facts(config.typed), create, say)


def cpu_preload(config: Config, say: Say = _stderr) -> tuple[str, ...]:
    """What LD_PRELOAD should hold for vLLM's CPU build on this machine (and say what was found)."""
    if config.typed.device != "cpu" or not config.typed.cpu_preload_libs:
        return ()
    from kimi_dflash.launch import cpu_libs

    libraries = cpu_libs.cpu_preload_libraries()
    say(cpu_libs.describe(libraries))
    return cpu_libs.merged_ld_preload(libraries)


FLASHINFER_PROBE = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('flashinfer') else 3)"


def serving_python_has_flashinfer(config: Config, say: Say = _stderr) -> bool | None:
    """On DEVICE=cuda, whether the Python that will run `vllm serve` finds flashinfer (located, not imported:
    ~0.1 s); None elsewhere or when that Python cannot be asked. Without it vLLM 0.26 fails building its sampler
    unless VLLM_USE_FLASHINFER_SAMPLER=0, which the plan then sets (and this says so)."""
    if config.typed.device != "cuda":
        return None
    from kimi_dflash.preflight.runtime_probe import interpreter_for_command

    python = interpreter_for_command(("vllm",))
    try:
        found = subprocess.run([python, "-c", FLASHINFER_PROBE], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if found.returncode not in (0, 3):
        return None
    if found.returncode == 3:
        say(
            f"serve: flashinfer is not installed for {python}: the plan sets VLLM_USE_FLASHINFER_SAMPLER=0 "
            "(vLLM's own sampler; vLLM 0.26 would fail building its sampler otherwise)"
        )
    return found.returncode == 0


def local_plan(config: Config, facts: Facts | None = None) -> LaunchPlan:
    return build_plan(
        config,
        python_executable=sys.executable,
        cache_dir=str(cache_root()),
        cpu_preload=cpu_preload(config),
        flashinfer=serving_python_has_flashinfer(config),
        environ=os.environ,
        facts=read_facts(config.typed) if facts is None else facts,
    )
