"""`kimi-dflash <verb>`: the project's one front door.

Each verb's module (core/options.py: ``add_cli_args`` + ``main``) is imported only when that verb runs, so
`kimi-dflash --help` is instant and the benchmark client never imports the server side. ``kimi-dflash CONFIG
[options]`` (no verb) still means ``kimi-dflash serve CONFIG [options]``."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from kimi_dflash.core import options

PROG = "kimi-dflash"


@dataclass(frozen=True)
class Verb:
    name: str
    module: str  # imported lazily, when the verb runs
    help: str
    group: str


GROUPS: dict[str, tuple[tuple[str, str, str], ...]] = {  # group -> (verb, module, one-line help)
    "serve": (
        ("serve", "kimi_dflash.launch.cli", "start vLLM from a config (--dry-run, --preflight, --wait, --stop)"),
        ("check-vllm", "kimi_dflash.launch.check_vllm", "will this vLLM start a config's plan? (reads its source)"),
        ("preflight", "kimi_dflash.preflight.cli", "check this machine for a plan, without a config file"),
        ("patch", "kimi_dflash.patcher.cli", "check, apply or revert the vLLM patches"),
        ("router", "kimi_dflash.scaleout.router", "put vllm-router in front of several servers"),
        ("preshard", "kimi_dflash.preshard.cli", "pre-shard a checkpoint for one tensor-parallel size"),
        ("image", "kimi_dflash.image.build", "build the container image"),
        ("demo", "kimi_dflash.demo.cli", "fabricate the tiny CPU demo models"),
    ),
    "measure": (
        ("bench", "kimi_dflash.bench.cli", "multi-turn streaming benchmark against a running server"),
        ("compare", "kimi_dflash.bench.compare", "compare result files at matched concurrency"),
        ("sweep", "kimi_dflash.sweep.cli", "sweep server configs x benchmark concurrency"),
        ("advise", "kimi_dflash.advisor.cli", "which speculative-token count to run, from measurements"),
        ("validate", "kimi_dflash.validate.cli", "is a candidate server's output the reference's?"),
        ("results", "kimi_dflash.results_cli", "render the result tables from result files"),
        ("qualify", "kimi_dflash.qualify.cli", "qualify this box: lossless, acceptance, speed, one report"),
    ),
    "fp8 / drafter": (
        ("calibrate-kv", "kimi_dflash.fp8.calibrate", "calibrate per-layer FP8 KV scales"),
        ("validate-fp8", "kimi_dflash.fp8.validate", "FP8 KV vs BF16 KV: accuracy, capacity, speed"),
        ("train-drafter", "kimi_dflash.drafter_training.cli", "train a DFlash drafter end to end"),
    ),
    "project": (("version", "kimi_dflash.version_cli", "print the versions of this package and of vLLM"),),
}
VERBS: tuple[Verb, ...] = tuple(Verb(*row, group) for group, rows in GROUPS.items() for row in rows)
BY_NAME = {verb.name: verb for verb in VERBS}
SERVE = BY_NAME["serve"]


def front_help() -> str:
    lines = [
        f"usage: {PROG} <verb> [options]      ({PROG} <verb> --help for a verb's options)",
        f"       {PROG} CONFIG [options]      (same as: {PROG} serve CONFIG [options])",
        "",
        "Serve Kimi K2.6 with DFlash speculative decoding through vLLM, and measure it.",
    ]
    width = max(len(verb.name) for verb in VERBS)
    for group in dict.fromkeys(verb.group for verb in VERBS):
        lines += ["", f"{group}:"]
        lines += [f"  {verb.name:<{width}}  {verb.help}" for verb in VERBS if verb.group == group]
    lines += ["", f"examples:  {PROG} demo-cpu --dry-run     {PROG} bench --base-url http://127.0.0.1:8262 --help"]
    return "\n".join(lines) + "\n"


def run_verb(verb: Verb, argv: list[str]) -> int:
    return options.run(verb.module, argv, prog=f"{PROG} {verb.name}", description=verb.help)


def unknown_verb(word: str) -> str | None:
    """A message when ``word`` reads as a mistyped verb rather than a config (no such file, no '/', no .env)."""
    if word.startswith("-") or "/" in word or word.endswith(".env") or os.path.exists(word):
        return None
    from kimi_dflash.config.shipped import shipped_config_names

    if f"{word}.env" in shipped_config_names():
        return None
    if not (close := difflib.get_close_matches(word, BY_NAME, n=1, cutoff=0.75)):
        return None
    return f"{PROG}: unknown verb {word!r}; did you mean {close[0]!r}? ({PROG} --help lists the verbs)"


def main(argv: Sequence[str] | None = None) -> int:
    if not (argv := list(sys.argv[1:] if argv is None else argv)):
        sys.stderr.write(front_help())
        return 2
    if (first := argv[0]) in ("-h", "--help", "help"):
        sys.stdout.write(front_help())
        return 0
    if first in ("-V", "--version"):
        return run_verb(BY_NAME["version"], argv[1:])
    if first in BY_NAME:
        return run_verb(BY_NAME[first], argv[1:])
    if message := unknown_verb(first):
        print(message, file=sys.stderr)
        return 2
    return run_verb(SERVE, argv)  # kimi-dflash CONFIG [options], as before the verbs existed


if __name__ == "__main__":
    sys.exit(main())
