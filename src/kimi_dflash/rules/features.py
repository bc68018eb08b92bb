"""Named probes (GRAMMAR) for the vLLM features a plan relies on, answered from vLLM's source, never from its version
string (backports and dev builds make version numbers lie): unknown, a warning, where a reshaped vLLM hides it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kimi_dflash.rules.backends import backend_enum
from kimi_dflash.rules.source import VllmSource

FeatureState = Literal["present", "absent", "unknown"]
Offered = tuple[tuple[str, ...], str] | None  # (everything of one kind a source offers, where it was read)
GRAMMAR = (
    "speculative_method:<method>, speculative_config.<field>, cli:--<flag>, env:<VARIABLE>, "
    "moe_backend:<name>, kv_cache_dtype:<dtype>, attention_backend:<NAME>"
)


@dataclass(frozen=True)
class Arrival:
    """A slow test checks each against the released wheels: absent in `previous`, present in `release`."""

    release: str
    previous: str
    note: str

    def __str__(self) -> str:
        return f"{self.release} ({self.note})"


INTRODUCED_IN: dict[str, Arrival] = {
    "speculative_method:dflash": Arrival("0.20.0", "0.19.1", "PR #36847"),
    "speculative_method:dspark": Arrival("0.25.0", "0.24.0", "DSparkModelTypes; Model Runner V2 only"),
    "speculative_config.attention_backend": Arrival(
        "0.21.0", "0.20.2", "PR #39930: the drafter picks its own attention backend"
    ),
    "speculative_config.kv_cache_dtype": Arrival(
        "0.26.0", "0.25.1", "the drafter's KV dtype separate from the target's"
    ),
    "speculative_config.num_speculative_tokens_per_batch_size": Arrival(
        "0.24.0", "0.23.0", "PR #32374: the speculative depth by batch size"
    ),
    "cli:--per-request-spec-decode-metrics": Arrival(
        "0.29.0", "0.28.0", "metrics.speculative_decoding on each response"
    ),
}


def introduced(feature: str) -> str:
    arrived = INTRODUCED_IN.get(feature)
    return f"use vLLM >= {arrived}" if arrived else "use a vLLM release that has it"


@dataclass(frozen=True)
class FeatureOutcome:
    name: str
    state: FeatureState
    evidence: str  # where the answer came from, or why there is none


def parse_feature(name: str) -> tuple[str, str]:
    if name.startswith("speculative_config.") and len(name) > len("speculative_config."):
        return "speculative_config", name.split(".", 1)[1]
    kind, sep, argument = name.partition(":")
    if not (sep and argument and kind in KINDS and kind != "speculative_config"):
        raise ValueError(f"unknown vLLM feature probe {name!r}; write one of: {GRAMMAR}")
    if kind == "cli" and not (argument.startswith("--") and len(argument) > 2):
        raise ValueError(f"vLLM feature {name!r}: a cli feature names a long option, e.g. cli:--language-model-only")
    return kind, argument


def probe_features(source: VllmSource, names: tuple[str, ...]) -> tuple[FeatureOutcome, ...]:
    offered: dict[str, Offered] = {}
    outcomes = []
    for name in names:
        kind, argument = parse_feature(name)
        what, read = KINDS[kind]
        found = offered[kind] if kind in offered else offered.setdefault(kind, read(source))
        if found is None:
            outcomes.append(FeatureOutcome(name, "unknown", f"{what} not found in {source.origin}"))
            continue
        # vLLM registers boolean options with argparse's BooleanOptionalAction, which derives "--no-x" from "--x".
        negated = kind == "cli" and argument.startswith("--no-") and f"--{argument[5:]}" in found[0]
        outcomes.append(FeatureOutcome(name, "present" if argument in found[0] or negated else "absent", found[1]))
    return tuple(outcomes)


def _literal(alias: str) -> Callable[[VllmSource], Offered]:
    def offered(source: VllmSource) -> Offered:
        module = source.find_module(alias, "vllm/config/")
        values = None if module is None else source.literal_values(module, alias)
        return None if values is None else (values, f"{alias} in {module}")

    return offered


def _speculative_fields(source: VllmSource) -> Offered:
    module = source.find_module("SpeculativeConfig", "vllm/config/")
    fields = None if module is None else source.class_fields(module, "SpeculativeConfig")
    return None if fields is None else (fields, f"SpeculativeConfig in {module}")


def _env_variables(source: VllmSource) -> Offered:
    keys = source.dict_keys("vllm/envs.py", "environment_variables")
    return None if keys is None else (keys, "environment_variables in vllm/envs.py")


def _attention_backends(source: VllmSource) -> Offered:
    found = backend_enum(source)
    return None if found is None else (tuple(found[1]), f"AttentionBackendEnum in {found[0]}")


def _cli_flags(source: VllmSource) -> Offered:
    """EngineArgs' literal "--x" strings plus FrontendArgs' fields (which it turns into "--field-name")."""
    engine, frontend = "vllm/engine/arg_utils.py", source.find_module("FrontendArgs", "vllm/entrypoints/")
    if not source.has(engine) or frontend is None:
        return None
    fields = (f"--{field.replace('_', '-')}" for field in source.class_fields(frontend, "FrontendArgs") or ())
    flags = (*source.option_strings(engine), *source.option_strings(frontend), *fields)
    return tuple(dict.fromkeys(flags)), f"vllm serve options in {engine} + {frontend}"


KINDS: dict[str, tuple[str, Callable[[VllmSource], Offered]]] = {  # kind -> (what it lists, how it is read)
    "speculative_method": ("SpeculativeMethod", _literal("SpeculativeMethod")),
    "speculative_config": ("SpeculativeConfig fields", _speculative_fields),
    "cli": ("vllm serve options", _cli_flags),
    "env": ("vLLM environment variables", _env_variables),
    "moe_backend": ("MoEBackend", _literal("MoEBackend")),
    "kv_cache_dtype": ("CacheDType", _literal("CacheDType")),
    "attention_backend": ("AttentionBackendEnum", _attention_backends),
}
