"""`kimi-dflash dry-engine CONFIG`: the installed vLLM's own start-up code judges a config's plan, before any weight
loads (preflight/dry_engine.py; on a host without the plan's GPU the platform is simulated and every fake listed).
Here, above preflight, because a config's demo models resolve through launch/prepare.py. Exit 0 vLLM starts the
plan, 2 vLLM refuses it (its own error shown), 1 the dry engine could not run."""

from __future__ import annotations

import argparse
import json
import sys

from kimi_dflash.preflight.dry_engine import dry_engine_for_plan


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="env-file config (a path or a shipped config's name, e.g. production)")
    parser.add_argument("--json", action="store_true", help="print the child's report as JSON")
    parser.add_argument(
        "--no-meta-model", action="store_true", help="stop after backend selection (no model built on meta)"
    )


def main(args: argparse.Namespace) -> int:
    from kimi_dflash.config.problems import ConfigError
    from kimi_dflash.config.shipped import resolve_config_argument
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.core.paths import cache_root
    from kimi_dflash.launch.prepare import resolve_demo_models
    from kimi_dflash.plan import build_plan

    try:
        config = resolve_demo_models(load_config(str(resolve_config_argument(args.config))), create=False)
    except ConfigError as error:
        for problem in error.problems:
            print(problem.render(), file=sys.stderr)
        return 2
    plan = build_plan(config, python_executable=sys.executable, cache_dir=str(cache_root()))
    verdict = dry_engine_for_plan(config, plan, meta_model=not args.no_meta_model)
    print(json.dumps(dict(verdict.report), indent=1, default=str) if args.json else verdict.render())
    if not verdict.ran:
        return 1
    return 0 if verdict.starts else 2


if __name__ == "__main__":
    cli = argparse.ArgumentParser(prog="python -m kimi_dflash.launch.dry_engine_cli", description=__doc__)
    add_cli_args(cli)
    sys.exit(main(cli.parse_args()))
