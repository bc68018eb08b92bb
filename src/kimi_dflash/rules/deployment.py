"""One planned deployment as the rules see it: the platform, the exact `vllm serve` command line and environment
(read the way vLLM's argument parser reads them), and what is known about the two checkpoints.

Built once per plan: from a launch plan (`Deployment.for_plan`: serve, --check-vllm, qualify, the matrix) or from a
bare command line (`Deployment.from_command`: python -m kimi_dflash.preflight -- vllm serve ...). Deriving what the
rules read from the exact argv keeps them in step with the plan: a flag smuggled in through EXTRA_VLLM_ARGS is
judged without anyone remembering to list it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kimi_dflash.core.envvars import KV_SCALE_MODE, KV_SCALE_MODE_OFF, VLLM_ROCM_USE_AITER, VLLM_ROCM_USE_AITER_MLA
from kimi_dflash.rules.checkpoint import CheckpointFacts, read_checkpoint_facts

if TYPE_CHECKING:
    from kimi_dflash.config.validate import Config
    from kimi_dflash.plan import LaunchPlan

TRUE_WORDS = ("1", "true", "yes", "on")
SPECULATIVE_OPTION = "--speculative-config"
# Options (and --speculative-config keys) whose value must be one vLLM knows: option -> feature kind.
VALUE_KINDS = {
    "--moe-backend": "moe_backend",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--attention-backend": "attention_backend",
}
SPECULATIVE_VALUE_KINDS = {
    "method": "speculative_method",
    "moe_backend": "moe_backend",
    "kv_cache_dtype": "kv_cache_dtype",
    "attention_backend": "attention_backend",
}
_NOT_A_CHOICE = {"auto", ""}  # lets vLLM choose; names no feature to probe


@dataclass(frozen=True)
class ServeCommand:
    """A `vllm serve` command line: `options` maps each long option (normalised: dashes, no "=value") to its value,
    None for a bare flag, the last one winning as in argparse; `speculative` is the merged --speculative-config
    object (JSON and dotted `--speculative-config.key value` forms)."""

    model: str | None
    options: Mapping[str, str | None]
    speculative: Mapping[str, object] | None
    env: Mapping[str, str] = field(default_factory=dict)

    def value(self, option: str) -> str | None:
        return self.options.get(option)

    def flag(self, option: str) -> bool:
        return option in self.options

    def features(self) -> tuple[str, ...]:
        """The vLLM features (rules/features.py's names) the command relies on: every option, every
        --speculative-config key, every enumerated value and every VLLM_* variable."""
        found: list[str] = []
        for option, value in self.options.items():
            found.append(f"cli:{option}")
            if option in VALUE_KINDS and value is not None and value not in _NOT_A_CHOICE:
                found.append(f"{VALUE_KINDS[option]}:{value}")
            for key, spec_value in (self.speculative or {}).items() if option == SPECULATIVE_OPTION else ():
                if key != "method":  # "method" is a field too, but what matters is that vLLM knows the method
                    found.append(f"speculative_config.{key}")
                kind = SPECULATIVE_VALUE_KINDS.get(key)
                if kind and isinstance(spec_value, str) and spec_value not in _NOT_A_CHOICE:
                    found.append(f"{kind}:{spec_value}")
        found.extend(f"env:{name}" for name in sorted(self.env) if name.startswith("VLLM_"))
        return tuple(dict.fromkeys(found))


def parse_serve_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ServeCommand:
    """Parse a vLLM command line. `argv` may start with the program ("vllm serve MODEL ..." or
    "python -m ... serve MODEL ..."): everything up to "serve" is skipped. Options may be written "--opt value",
    "--opt=value", with underscores ("--max_model_len"), or dotted ("--speculative-config.kv_cache_dtype auto")."""
    args = list(argv)
    if "serve" in args:
        args = args[args.index("serve") + 1 :]
    model = args[0] if args and not args[0].startswith("--") else None
    options: dict[str, str | None] = {}
    speculative: dict[str, object] | None = None
    for index, token in enumerate(args):
        if not token.startswith("--") or token == "--":
            continue
        name, has_inline, inline = token.partition("=")
        following = args[index + 1] if index + 1 < len(args) else None
        value = inline if has_inline else None if following is None or following.startswith("--") else following
        option, dot, key = name.partition(".")
        option = "--" + option[2:].replace("_", "-")
        if option == SPECULATIVE_OPTION:
            speculative = dict(speculative or {})
            if dot:
                speculative[key.replace("-", "_")] = value
            elif value is not None:
                speculative.update(_json_object(value))
        options[option] = value  # a repeated option keeps its first position and takes the last value
    return ServeCommand(model, options, speculative, dict(env or {}))


def features_from_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    return parse_serve_command(argv, env).features()


def _json_object(text: str) -> dict[str, object]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {}  # vLLM reports a malformed --speculative-config itself, with its own message
    return data if isinstance(data, dict) else {}


def _int(value: object) -> int | None:
    try:
        return None if value is None else int(str(value))
    except ValueError:
        return None


@dataclass(frozen=True)
class Deployment:
    platform: str  # "rocm", "cuda" or "cpu"
    command: ServeCommand
    target: CheckpointFacts | None  # None: neither a config.json nor shipped facts
    drafter: CheckpointFacts | None
    label: str = "the plan"  # e.g. the config file, for report headers
    # Options that came from EXTRA_VLLM_ARGS, so a finding can blame the right config key.
    extra_options: frozenset[str] = field(default_factory=frozenset)
    # `vllm serve` option -> the config key that sets it, for fixes that name a key to change.
    option_keys: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def for_plan(cls, config: Config, plan: LaunchPlan, inherited_env: Mapping[str, str] | None = None) -> Deployment:
        """The plan as the rules see it. `inherited_env`: the environment vLLM will also inherit (preflight passes
        os.environ; --check-vllm and the matrix judge the plan alone)."""
        from kimi_dflash.config.loader import display_path
        from kimi_dflash.plan import OPTION_KEYS

        demo = config.demo_models is not None  # fabricated models: never the shipped Kimi facts
        typed = config.typed
        return cls.from_command(
            typed.device,
            plan.argv,
            {**(inherited_env or {}), **plan.env},
            model_dir=None if typed.model_dir is None else Path(str(typed.model_dir)),
            model_repo=None if demo else typed.model_repo,
            drafter_dir=None if typed.draft_model_dir is None else Path(str(typed.draft_model_dir)),
            drafter_repo=None if demo else typed.draft_model_repo,
            label=display_path(config.path),
            extra_args=typed.extra_vllm_args,
            option_keys=OPTION_KEYS,
        )

    @classmethod
    def from_command(
        cls,
        platform: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        model_dir: Path | None = None,
        model_repo: str | None = None,
        drafter_dir: Path | None = None,
        drafter_repo: str | None = None,
        label: str = "the command line",
        extra_args: str | None = None,
        option_keys: Mapping[str, str] | None = None,
    ) -> Deployment:
        command = parse_serve_command(argv, env)
        spec_model = (command.speculative or {}).get("model")
        drafter_dir = drafter_dir or (Path(str(spec_model)) if spec_model else None)
        model_dir = model_dir or (Path(command.model) if command.model else None)
        extra = parse_serve_command(["serve", *shlex.split(extra_args)]).options if extra_args else {}
        return cls(
            platform=platform,
            command=command,
            target=read_checkpoint_facts(model_dir, model_repo, "target"),
            drafter=read_checkpoint_facts(drafter_dir, drafter_repo, "drafter") if command.speculative else None,
            label=label,
            extra_options=frozenset(extra),
            option_keys=dict(option_keys or {}),
        )

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
        method = self.speculative.get("method")
        return None if method is None else str(method)

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
        """ROCm's AITER MLA path: on when VLLM_ROCM_USE_AITER is set and VLLM_ROCM_USE_AITER_MLA (default on in
        every release 0.20-0.33) is not switched off."""
        return self.env_true(VLLM_ROCM_USE_AITER) and self.env_true(VLLM_ROCM_USE_AITER_MLA, "1")

    def config_key(self, option: str) -> str | None:
        """The config key that sets a `vllm serve` option."""
        return "EXTRA_VLLM_ARGS" if option in self.extra_options else self.option_keys.get(option)

    def blame(self, option: str) -> str:
        """ "KEY (sets --option)" for a fix line, or the option alone when no config key sets it."""
        key = self.config_key(option)
        return f"{key} (sets {option})" if key else option
