"""One planned deployment, as the compatibility rules and the patches' `needed_when` predicates see it: the
platform, the exact `vllm serve` command and environment, and what is known about the two checkpoints.

Built from a launch plan (serve.sh) or from a bare command line (python -m kimi_dflash.preflight -- vllm serve
...), so the same rules judge both.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kimi_dflash.core.envvars import KV_SCALE_MODE, KV_SCALE_MODE_OFF, VLLM_ROCM_USE_AITER, VLLM_ROCM_USE_AITER_MLA
from kimi_dflash.preflight.checkpoint_facts import CheckpointFacts, read_checkpoint_facts
from kimi_dflash.preflight.plan_features import ServeCommand, parse_serve_command

TRUE_WORDS = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Deployment:
    platform: str  # "rocm", "cuda" or "cpu"
    command: ServeCommand
    target: CheckpointFacts | None  # None: neither a config.json nor shipped facts
    drafter: CheckpointFacts | None
    label: str = "the plan"  # e.g. the config file, for report headers
    # Options that came from EXTRA_VLLM_ARGS, so a finding can blame the right config key.
    extra_options: frozenset[str] = field(default_factory=frozenset)
    # Config key -> the option / speculative key it produces, for fixes that name a key to change.
    option_keys: Mapping[str, str] = field(default_factory=dict)

    @property
    def env(self) -> Mapping[str, str]:
        return self.command.env

    @property
    def speculative_method(self) -> str | None:
        spec = self.command.speculative
        method = None if spec is None else spec.get("method")
        return None if method is None else str(method)

    @property
    def dflash(self) -> bool:
        return self.speculative_method == "dflash"

    @property
    def moe_backend(self) -> str:
        return self.command.value("--moe-backend") or "auto"

    @property
    def kv_cache_dtype(self) -> str:
        return self.command.value("--kv-cache-dtype") or "auto"

    @property
    def drafter_attention_backend(self) -> str | None:
        spec = self.command.speculative or {}
        value = spec.get("attention_backend")
        return None if value in (None, "", "auto") else str(value)

    @property
    def kv_scale_mode(self) -> str:
        return (self.env.get(KV_SCALE_MODE) or KV_SCALE_MODE_OFF).strip().lower()

    @property
    def aiter_mla(self) -> bool:
        """ROCm's AITER MLA path: on when VLLM_ROCM_USE_AITER is set and VLLM_ROCM_USE_AITER_MLA (default on in
        every release 0.20-0.33) is not switched off."""
        aiter = self.env.get(VLLM_ROCM_USE_AITER, "").strip().lower() in TRUE_WORDS
        mla = self.env.get(VLLM_ROCM_USE_AITER_MLA, "1").strip().lower() in TRUE_WORDS
        return aiter and mla

    def config_key(self, option: str) -> str | None:
        """The config key that sets a `vllm serve` option or a speculative-config key ("speculative.<key>")."""
        if option in self.extra_options:
            return "EXTRA_VLLM_ARGS"
        return self.option_keys.get(option)


def deployment_from_command(
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
    extra = frozenset(parse_serve_command(["serve", *shlex.split(extra_args)]).options) if extra_args else frozenset()
    return Deployment(
        platform=platform,
        command=command,
        target=read_checkpoint_facts(model_dir, model_repo, "target"),
        drafter=read_checkpoint_facts(drafter_dir, drafter_repo, "drafter") if command.speculative else None,
        label=label,
        extra_options=extra,
        option_keys=dict(option_keys or {}),
    )
