"""One planned deployment as the rules see it: the platform, the exact `vllm serve` command line and environment (read
as vLLM's argument parser reads them, so a flag smuggled in through EXTRA_VLLM_ARGS is judged too), the checkpoints."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kimi_dflash.checkpoint import CheckpointFacts, Facts, read_checkpoints
from kimi_dflash.config.convert import TRUE_WORDS
from kimi_dflash.config.schema import KEY
from kimi_dflash.core.envvars import KV_SCALE_MODE, KV_SCALE_MODE_OFF, VLLM_ROCM_USE_AITER, VLLM_ROCM_USE_AITER_MLA

if TYPE_CHECKING:
    from kimi_dflash.config.validate import Config
    from kimi_dflash.plan import LaunchPlan

SPECULATIVE_OPTION = "--speculative-config"
Env = Mapping[str, str] | None
Where = tuple[object, str | None]  # a checkpoint: (directory, Hugging Face repo)
NOWHERE: Where = (None, None)
# Values that must be one vLLM knows: --option / --speculative-config key -> feature kind (rules/features.py).
VALUE_KINDS = {
    "--moe-backend": "moe_backend",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--attention-backend": "attention_backend",
}
# The same values as --speculative-config keys (the option's name in snake case), and the drafter's method.
SPECULATIVE_VALUE_KINDS = {
    "method": "speculative_method",
    **{o[2:].replace("-", "_"): k for o, k in VALUE_KINDS.items()},
}
_NOT_A_CHOICE = {"auto", ""}  # lets vLLM choose: names no feature to probe


@dataclass(frozen=True)
class ServeCommand:
    """`options`: long option -> value (None: a bare flag), the last winning as in argparse; `speculative` merges
    --speculative-config's JSON and dotted `--speculative-config.key value` forms."""

    model: str | None
    options: Mapping[str, str | None]
    speculative: Mapping[str, object] | None
    env: Mapping[str, str] = field(default_factory=dict)

    def value(self, option: str) -> str | None:
        return self.options.get(option)

    def flag(self, option: str) -> bool:
        return option in self.options

    def features(self) -> tuple[str, ...]:
        found: list[str] = []
        for option, value in self.options.items():
            found.append(f"cli:{option}")
            if option in VALUE_KINDS and value not in (None, *_NOT_A_CHOICE):
                found.append(f"{VALUE_KINDS[option]}:{value}")
            for key, spec_value in (self.speculative or {}).items() if option == SPECULATIVE_OPTION else ():
                if key != "method":  # "method" is a field too, but what matters is that vLLM knows the method
                    found.append(f"speculative_config.{key}")
                if key in SPECULATIVE_VALUE_KINDS and isinstance(spec_value, str) and spec_value not in _NOT_A_CHOICE:
                    found.append(f"{SPECULATIVE_VALUE_KINDS[key]}:{spec_value}")
        found.extend(f"env:{name}" for name in sorted(self.env) if name.startswith("VLLM_"))
        return tuple(dict.fromkeys(found))


def parse_serve_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ServeCommand:
    """Everything up to "serve" is skipped; "--opt value", "--opt=value", "--max_model_len" and dotted keys are read."""
    args = list(argv)
    args = args[args.index("serve") + 1 :] if "serve" in args else args
    options: dict[str, str | None] = {}
    speculative: dict[str, object] | None = None
    for index, token in enumerate(args):
        if not token.startswith("--") or token == "--":
            continue
        name, has_inline, inline = token.partition("=")
        following = args[index + 1] if index + 1 < len(args) else "--"
        value = inline if has_inline else None if following.startswith("--") else following
        option, dot, key = name.partition(".")
        option = "--" + option[2:].replace("_", "-")
        if option == SPECULATIVE_OPTION:
            speculative = dict(speculative or {})
            if dot:
                speculative[key.replace("-", "_")] = value
            elif value is not None:
                try:
                    found = json.loads(value)
                except json.JSONDecodeError:  # vLLM reports a malformed --speculative-config itself, its own way
                    found = None
                speculative.update(found if isinstance(found, dict) else {})
        options[option] = value  # a repeated option keeps its first position and takes the last value
    model = args[0] if args and not args[0].startswith("--") else None
    return ServeCommand(model, options, speculative, dict(env or {}))


def features_from_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    return parse_serve_command(argv, env).features()


def _int(value: object) -> int | None:
    try:
        return None if value is None else int(str(value))
    except ValueError:
        return None


@dataclass(frozen=True)
class Deployment:
    platform: str  # "rocm", "cuda" or "cpu"
    command: ServeCommand
    facts: Facts  # the checkpoints'
    label: str = "the plan"  # e.g. the config file, for report headers
    # `vllm serve` option -> the config key that sets it (EXTRA_VLLM_ARGS for its options), for fixes naming a key.
    option_keys: Mapping[str, str] = field(default_factory=dict)
    drafter_rope_amplitude: str | float | None = None  # DRAFTER_ROPE_AMPLITUDE (None: a bare command line)

    @classmethod
    def for_plan(cls, config: Config, plan: LaunchPlan, facts: Facts, inherited_env: Env = None) -> Deployment:
        """`inherited_env`: what vLLM also inherits (serve's os.environ). Built by launch/prepare.py."""
        from kimi_dflash.config.loader import display_path
        from kimi_dflash.plan import OPTION_KEYS

        typed = config.typed
        extra = parse_serve_command(["serve", *shlex.split(typed.extra_vllm_args or "")]).options
        return cls(
            platform=typed.device,
            command=parse_serve_command(plan.argv, {**(inherited_env or {}), **plan.env}),
            facts=facts,
            label=display_path(config.path),
            option_keys={**OPTION_KEYS, **dict.fromkeys(extra, KEY.EXTRA_VLLM_ARGS)},
            drafter_rope_amplitude=typed.drafter_rope_choice,
        )

    @classmethod
    def from_command(
        cls, platform: str, argv: Sequence[str], env: Env = None, *, model: Where = NOWHERE, drafter: Where = NOWHERE
    ) -> Deployment:
        """`model` / `drafter`: (directory, default the command line's; repo whose shipped facts stand in for it)."""
        command = parse_serve_command(argv, env)
        model_dir = model[0] or command.model
        drafter_dir = drafter[0] or (command.speculative or {}).get("model")
        facts = read_checkpoints((model_dir, model[1]), (drafter_dir, drafter[1]) if command.speculative else None)
        return cls(platform, command, facts, "the command line")

    @property
    def target(self) -> CheckpointFacts | None:
        return self.facts.target

    @property
    def drafter(self) -> CheckpointFacts | None:
        return self.facts.drafter

    @property
    def env(self) -> Mapping[str, str]:
        return self.command.env

    def env_true(self, name: str, default: str = "") -> bool:
        return self.env.get(name, default).strip().lower() in TRUE_WORDS

    @property
    def speculative(self) -> Mapping[str, object]:
        return self.command.speculative or {}

    @property
    def speculative_method(self) -> str | None:
        return None if self.speculative.get("method") is None else str(self.speculative["method"])

    @property
    def dflash(self) -> bool:
        return self.speculative_method == "dflash"

    @property
    def num_speculative_tokens(self) -> int | None:
        return _int(self.speculative.get("num_speculative_tokens"))

    @property
    def tensor_parallel_size(self) -> int:
        return _int(self.command.value("--tensor-parallel-size") or self.command.value("-tp")) or 1

    @property
    def moe_backend(self) -> str:
        return self.command.value("--moe-backend") or "auto"

    @property
    def kv_cache_dtype(self) -> str:
        return self.command.value("--kv-cache-dtype") or "auto"

    @property
    def drafter_attention_backend(self) -> str | None:
        value = self.speculative.get("attention_backend")
        return None if value in (None, "", "auto") else str(value)

    @property
    def kv_scale_mode(self) -> str:
        return (self.env.get(KV_SCALE_MODE) or KV_SCALE_MODE_OFF).strip().lower()

    @property
    def aiter_mla(self) -> bool:
        """ROCm's AITER MLA path: VLLM_ROCM_USE_AITER set and VLLM_ROCM_USE_AITER_MLA (default on) not off."""
        return self.env_true(VLLM_ROCM_USE_AITER) and self.env_true(VLLM_ROCM_USE_AITER_MLA, "1")

    def blame(self, option: str) -> str:
        """ "KEY (sets --option)" for a fix line, or the option alone when no config key sets it."""
        key = self.option_keys.get(option)
        return f"{key} (sets {option})" if key else option
