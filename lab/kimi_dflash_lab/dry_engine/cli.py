"""`python -m kimi_dflash_lab dry-engine CONFIG`: the installed vLLM's own start-up code judges a config's plan,
before any weight loads (engine.py; on a host without the plan's GPU the platform is simulated and every fake
listed), and its verdict is compared with the product's compatibility rules (compare.py): CI's oracle for the
rules. Exit 0 vLLM starts the plan and the rules agree, 2 vLLM refuses it (its own error shown) or they disagree,
1 the dry engine could not run."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from kimi_dflash.core.options import declare, option, run
from kimi_dflash_lab.dry_engine.platform_fakes import CUDA_GPUS, DEFAULT_CUDA_GPU


@dataclass(kw_only=True)
class DryEngineOptions:
    config: str = option("env-file config (a path or a shipped config's name, e.g. production)", positional=True,
        required=True)  # fmt: skip
    json: bool = option("print the child's report as JSON")
    no_meta_model: bool = option("stop after backend selection (no model built on meta)")
    vllm: str | None = option("judge with that release's CUDA wheel, from the venv `python -m kimi_dflash_lab "
        "dry-engine-venv VERSION` built (default: the vLLM this Python imports)", metavar="VERSION")  # fmt: skip
    simulate_gpu: str = option("the simulated NVIDIA GPU", choices=sorted(CUDA_GPUS), default=DEFAULT_CUDA_GPU)


add_cli_args = declare(DryEngineOptions, __doc__)


def main(args: DryEngineOptions) -> int:
    from kimi_dflash.checkpoint import read_facts
    from kimi_dflash.config.problems import ConfigError
    from kimi_dflash.config.shipped import resolve_config_argument
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.core.paths import cache_root
    from kimi_dflash.launch import hooks
    from kimi_dflash.launch.prepare import resolve_demo_models
    from kimi_dflash.plan import build_plan
    from kimi_dflash.preflight.runtime_child import vllm_package_dir
    from kimi_dflash.rules.engine import judge
    from kimi_dflash.rules.source import VllmSource
    from kimi_dflash_lab.dry_engine.compare import compare
    from kimi_dflash_lab.dry_engine.engine import dry_engine_for_plan
    from kimi_dflash_lab.dry_engine.venv import venv_python, venv_vllm_dir

    try:
        config = resolve_demo_models(load_config(str(resolve_config_argument(args.config))), create=False)
    except ConfigError as error:
        for problem in error.problems:
            print(problem.render(), file=sys.stderr)
        return 2
    python, installed = sys.executable, vllm_package_dir()  # the vLLM this Python imports
    if args.vllm is not None:
        venv = venv_python(args.vllm)
        if venv is None:
            print(
                f"dry-engine: no venv for vLLM {args.vllm}: build it with `python -m kimi_dflash_lab dry-engine-venv "
                f"{args.vllm}` (downloads a few GB)",
                file=sys.stderr,
            )
            return 1
        python, installed = str(venv), venv_vllm_dir(args.vllm)
    plan = build_plan(
        config, python_executable=sys.executable, cache_dir=str(cache_root()), facts=read_facts(config.typed)
    )
    verdict = dry_engine_for_plan(
        config, plan, python=python, meta_model=not args.no_meta_model, cuda_gpu=args.simulate_gpu
    )
    if args.json:
        print(json.dumps(dict(verdict.report), indent=1, default=str))
        return 0 if verdict.ran and verdict.starts else (1 if not verdict.ran else 2)
    print(verdict.render())
    agreement = None
    if installed is not None:
        agreement = compare(verdict, judge(hooks.deployment(config, plan), VllmSource.open(installed)))
        print("  " + agreement.render().replace("\n", "\n  "))
    if not verdict.ran:
        return 1
    return 0 if verdict.starts and (agreement is None or agreement.agrees) else 2


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab dry-engine"))
