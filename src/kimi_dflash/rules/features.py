"""Named probes for the vLLM features a launch plan relies on, answered from vLLM's source (never from its
version string: backports and dev builds make version numbers lie).

Feature names (the grammar `parse_feature` accepts):

    speculative_method:<method>        e.g. speculative_method:dflash   (SpeculativeMethod Literal)
    speculative_config.<field>         e.g. speculative_config.attention_backend   (SpeculativeConfig field)
    cli:--<flag>                       e.g. cli:--language-model-only   (a `vllm serve` option)
    env:<VARIABLE>                     e.g. env:VLLM_ROCM_USE_AITER     (vllm.envs knows the variable)
    moe_backend:<name>                 e.g. moe_backend:aiter           (MoEBackend Literal)
    kv_cache_dtype:<dtype>             e.g. kv_cache_dtype:fp8_e4m3     (CacheDType Literal)
    attention_backend:<NAME>           e.g. attention_backend:TRITON_ATTN   (AttentionBackendEnum member)

Each probe answers present / absent / unknown; unknown means the definition it reads was not found where any
known vLLM keeps it (a reshaped vLLM), which the check reports as a warning rather than guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kimi_dflash.rules.source import VllmSource

FeatureState = Literal["present", "absent", "unknown"]


@dataclass(frozen=True)
class Arrival:
    """The first vLLM release with a feature, for the fix line of a missing one. A slow test checks each against the
    released wheels: absent in `previous` (the release before on the package index), present in `release`."""

    release: str
    previous: str
    note: str

    def __str__(self) -> str:
        return f"{self.release} ({self.note})"


INTRODUCED_IN: dict[str, Arrival] = {
    "speculative_method:dflash": Arrival("0.20.0", "0.19.1", "PR #36847"),
    "speculative_config.attention_backend": Arrival(
        "0.21.0", "0.20.2", "PR #39930: the drafter picks its own attention backend"
    ),
    "speculative_config.kv_cache_dtype": Arrival(
        "0.26.0", "0.25.1", "the drafter's KV dtype separate from the target's"
    ),
    "cli:--per-request-spec-decode-metrics": Arrival(
        "0.29.0", "0.28.0", "metrics.speculative_decoding on each response"
    ),
}


def introduced(feature: str) -> str:
    """The fix for a missing feature: the release that brought it."""
    arrived = INTRODUCED_IN.get(feature)
    return f"use vLLM >= {arrived}" if arrived else "use a vLLM release that has it"


GRAMMAR = (
    "speculative_method:<method>, speculative_config.<field>, cli:--<flag>, env:<VARIABLE>, "
    "moe_backend:<name>, kv_cache_dtype:<dtype>, attention_backend:<NAME>"
)


@dataclass(frozen=True)
class FeatureOutcome:
    name: str
    state: FeatureState
    evidence: str  # where the answer came from, or why there is none


@dataclass(frozen=True)
class _Kind:
    """How to list everything of one kind that a vLLM source offers (None: definition not found)."""

    what: str  # human name of the list, for evidence lines
    offered: Callable[[VllmSource], tuple[tuple[str, ...], str] | None]


def parse_feature(name: str) -> tuple[str, str]:
    """Split a feature name into (kind, argument); ValueError naming the grammar when it is not one."""
    if name.startswith("speculative_config.") and len(name) > len("speculative_config."):
        return "speculative_config", name.split(".", 1)[1]
    kind, sep, argument = name.partition(":")
    if sep and argument and kind in _KINDS and kind != "speculative_config":
        if kind == "cli" and not (argument.startswith("--") and len(argument) > 2):
            raise ValueError(
                f"vLLM feature {name!r}: a cli feature names a long option, e.g. cli:--language-model-only"
            )
        return kind, argument
    raise ValueError(f"unknown vLLM feature probe {name!r}; write one of: {GRAMMAR}")


def probe_features(source: VllmSource, names: tuple[str, ...]) -> tuple[FeatureOutcome, ...]:
    """Answer every named feature from one source tree (each kind's definition is read once)."""
    cache: dict[str, tuple[tuple[str, ...], str] | None] = {}
    outcomes = []
    for name in names:
        kind, argument = parse_feature(name)
        if kind not in cache:
            cache[kind] = _KINDS[kind].offered(source)
        offered = cache[kind]
        if offered is None:
            outcomes.append(FeatureOutcome(name, "unknown", f"{_KINDS[kind].what} not found in {source.origin}"))
            continue
        values, where = offered
        state: FeatureState = "present" if _offers(kind, argument, values) else "absent"
        outcomes.append(FeatureOutcome(name, state, where))
    return tuple(outcomes)


def _offers(kind: str, argument: str, values: tuple[str, ...]) -> bool:
    if argument in values:
        return True
    # vLLM registers boolean options with argparse's BooleanOptionalAction, which derives "--no-x" from "--x".
    return kind == "cli" and argument.startswith("--no-") and f"--{argument[len('--no-') :]}" in values


# --- how each kind is read ----------------------------------------------------------------------------


def _literal(alias: str, under: str) -> Callable[[VllmSource], tuple[tuple[str, ...], str] | None]:
    def offered(source: VllmSource) -> tuple[tuple[str, ...], str] | None:
        module = source.find_module(alias, under)
        values = None if module is None else source.literal_values(module, alias)
        return None if values is None else (values, f"{alias} in {module}")

    return offered


def _speculative_fields(source: VllmSource) -> tuple[tuple[str, ...], str] | None:
    module = source.find_module("SpeculativeConfig", "vllm/config/")
    fields = None if module is None else source.class_fields(module, "SpeculativeConfig")
    return None if fields is None else (fields, f"SpeculativeConfig in {module}")


def _env_variables(source: VllmSource) -> tuple[tuple[str, ...], str] | None:
    keys = source.dict_keys("vllm/envs.py", "environment_variables")
    return None if keys is None else (keys, "environment_variables in vllm/envs.py")


def _attention_backends(source: VllmSource) -> tuple[tuple[str, ...], str] | None:
    for under in ("vllm/v1/attention/", "vllm/attention/", "vllm/"):
        module = source.find_module("AttentionBackendEnum", under)
        if module is not None:
            members = source.enum_members(module, "AttentionBackendEnum")
            return None if members is None else (members, f"AttentionBackendEnum in {module}")
    return None


def _cli_flags(source: VllmSource) -> tuple[tuple[str, ...], str] | None:
    """Options `vllm serve` accepts: the literal "--x" strings EngineArgs.add_cli_args registers, plus the
    frontend dataclass fields that FrontendArgs turns into "--field-name" (and its own literal strings)."""
    engine = "vllm/engine/arg_utils.py"
    frontend = source.find_module("FrontendArgs", "vllm/entrypoints/")
    if not source.has(engine) or frontend is None:
        return None
    fields = source.class_fields(frontend, "FrontendArgs") or ()
    flags = (
        *source.option_strings(engine),
        *source.option_strings(frontend),
        *(f"--{field.replace('_', '-')}" for field in fields),
    )
    return tuple(dict.fromkeys(flags)), f"vllm serve options in {engine} + {frontend}"


_KINDS: dict[str, _Kind] = {
    "speculative_method": _Kind("SpeculativeMethod", _literal("SpeculativeMethod", "vllm/config/")),
    "speculative_config": _Kind("SpeculativeConfig fields", _speculative_fields),
    "cli": _Kind("vllm serve options", _cli_flags),
    "env": _Kind("vLLM environment variables", _env_variables),
    "moe_backend": _Kind("MoEBackend", _literal("MoEBackend", "vllm/config/")),
    "kv_cache_dtype": _Kind("CacheDType", _literal("CacheDType", "vllm/config/")),
    "attention_backend": _Kind("AttentionBackendEnum", _attention_backends),
}
