"""DISTRIBUTED_EXECUTOR_BACKEND: the CPU demo runs its one worker inside vLLM's engine core (uni), production keeps
vLLM's own choice (mp at TP 8); the plan's argv and environment for each."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_dflash.config.problems import ConfigError
from kimi_dflash.config.validate import load_config
from kimi_dflash.plan import build_plan
from repo_paths import CONFIGS_DIR
from serve_helpers import write

FLAG = "--distributed-executor-backend"
MULTIPROC = "VLLM_ENABLE_V1_MULTIPROCESSING"


def plan_for(name: str, environ: dict[str, str] | None = None):
    config = load_config(CONFIGS_DIR / name, environ=environ or {})
    return build_plan(config, python_executable="/usr/bin/python3", cache_dir="/cache")


@pytest.mark.parametrize("name", ["demo-cpu.env", "demo-cpu-baseline.env", "demo-qwen3-cpu.env"])
def test_cpu_demos_run_the_worker_in_the_engine_core(name: str) -> None:
    plan = plan_for(name)
    assert plan.argv[plan.argv.index(FLAG) + 1] == "uni"
    # Without it vLLM's CPU platform turns uni back into mp (platforms/cpu.py, check_and_update_config).
    assert plan.env[MULTIPROC] == "0"


def test_auto_leaves_the_choice_to_vllm() -> None:
    plan = plan_for("demo-cpu.env", {"DISTRIBUTED_EXECUTOR_BACKEND": "auto"})
    assert FLAG not in plan.argv and MULTIPROC not in plan.env
    production = plan_for("production.env")
    assert FLAG not in production.argv and MULTIPROC not in production.env


def test_uni_on_a_gpu_passes_the_flag_but_never_the_cpu_switch() -> None:
    plan = plan_for("production.env", {"DISTRIBUTED_EXECUTOR_BACKEND": "uni", "TENSOR_PARALLEL_SIZE": "1"})
    assert plan.argv[plan.argv.index(FLAG) + 1] == "uni" and MULTIPROC not in plan.env


def test_uni_with_tensor_parallelism_is_refused(tmp_path: Path) -> None:
    config = write(tmp_path, f"EXTENDS={CONFIGS_DIR / 'production.env'}\nDISTRIBUTED_EXECUTOR_BACKEND=uni\n")
    with pytest.raises(ConfigError) as info:
        load_config(config, environ={})
    (problem,) = [p for p in info.value.problems if p.key == "DISTRIBUTED_EXECUTOR_BACKEND"]
    assert "TENSOR_PARALLEL_SIZE=8" in problem.message and "auto" in problem.fix
