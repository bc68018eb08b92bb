"""Which vLLM features a `vllm serve` command line relies on: every option it passes, every key of its
--speculative-config, the values that must be members of a vLLM Literal/enum, and the VLLM_* variables it sets.

Deriving them from the exact argv and environment the launcher will run keeps preflight in step with the plan:
a new flag in the plan (or one smuggled in through EXTRA_VLLM_ARGS) is probed without anyone remembering to list
it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Options whose value must be one vLLM knows: option -> feature kind.
VALUE_KINDS = {
    "--moe-backend": "moe_backend",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--attention-backend": "attention_backend",
}
# --speculative-config keys whose value must be one vLLM knows.
SPECULATIVE_VALUE_KINDS = {
    "method": "speculative_method",
    "moe_backend": "moe_backend",
    "kv_cache_dtype": "kv_cache_dtype",
    "attention_backend": "attention_backend",
}
SPECULATIVE_OPTION = "--speculative-config"
# "auto" lets vLLM choose; it names no feature to probe.
_NOT_A_CHOICE = {"auto", ""}


@dataclass(frozen=True)
class ServeCommand:
    """A `vllm serve` command line read the way vLLM's argument parser reads it.

    `options` maps each long option (normalised: dashes, no "=value") to its value, None for a bare flag; when an
    option repeats, the last one wins, as in argparse. `speculative` is the merged --speculative-config object
    (JSON and dotted `--speculative-config.key value` forms).
    """

    model: str | None
    options: Mapping[str, str | None]
    speculative: Mapping[str, object] | None
    env: Mapping[str, str] = field(default_factory=dict)

    def value(self, option: str) -> str | None:
        return self.options.get(option)

    def flag(self, option: str) -> bool:
        return option in self.options


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
        value = inline if has_inline else _next_value(args, index)
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
    """Feature names (see vllm_features) for a vLLM command line and the environment set for it."""
    return features_of(parse_serve_command(argv, env))


def features_of(command: ServeCommand) -> tuple[str, ...]:
    features: list[str] = []
    for option, value in command.options.items():
        features.append(f"cli:{option}")
        if option in VALUE_KINDS and value is not None and value not in _NOT_A_CHOICE:
            features.append(f"{VALUE_KINDS[option]}:{value}")
        if option == SPECULATIVE_OPTION and command.speculative is not None:
            features.extend(_speculative_features(command.speculative))
    features.extend(f"env:{name}" for name in sorted(command.env) if name.startswith("VLLM_"))
    return tuple(dict.fromkeys(features))


def _next_value(args: list[str], index: int) -> str | None:
    following = args[index + 1] if index + 1 < len(args) else None
    return None if following is None or following.startswith("--") else following


def _json_object(text: str) -> dict[str, object]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {}  # vLLM reports a malformed --speculative-config itself, with its own message
    return data if isinstance(data, dict) else {}


def _speculative_features(spec: Mapping[str, object]) -> list[str]:
    features = []
    for key, value in spec.items():
        if key != "method":  # "method" is a field too, but what matters is that vLLM knows the method
            features.append(f"speculative_config.{key}")
        kind = SPECULATIVE_VALUE_KINDS.get(key)
        if kind and isinstance(value, str) and value not in _NOT_A_CHOICE:
            features.append(f"{kind}:{value}")
    return features
