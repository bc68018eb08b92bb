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
    from kimi_dflash.config.problems import ConfigError
    from kimi_dflash.config.shipped import resolve_config_argument
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.launch.prepare import prepare
    from kimi_dflash.patcher.floor import package_dir
    from kimi_dflash.rules.source import VllmSource
    from kimi_dflash_lab.dry_engine.compare import compare
    from kimi_dflash_lab.dry_engine.engine import dry_engine_for_plan
    from kimi_dflash_lab.dry_engine.venv import venv_python, venv_vllm_dir

    try:
        config = load_config(str(resolve_config_argument(args.config)))
    except ConfigError as error:
        for problem in error.problems:
            print(problem.render(), file=sys.stderr)
        return 2
    python, installed = sys.executable, package_dir()  # the vLLM this Python imports
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
    source = None if installed is None else VllmSource.open(installed)
    prepared = prepare(config, {}, source=lambda _plan: source)  # the plan serve would start, judged
    verdict = dry_engine_for_plan(
        prepared.config, prepared.plan, python=python, meta_model=not args.no_meta_model, cuda_gpu=args.simulate_gpu
    )
    if args.json:
        print(json.dumps(dict(verdict.report), indent=1, default=str))
        return 0 if verdict.ran and verdict.starts else (1 if not verdict.ran else 2)
    print(verdict.render())
    agreement = None
    if prepared.verdict is not None:
        agreement = compare(verdict, prepared.verdict)
        print("  " + agreement.render().replace("\n", "\n  "))
    if not verdict.ran:
        return 1
    return 0 if verdict.starts and (agreement is None or agreement.agrees) else 2


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab dry-engine"))
