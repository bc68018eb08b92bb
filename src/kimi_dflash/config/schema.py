"""The one schema for every config key: name, type, default, allowed range and documentation.

Validation, the launch plan, `--help` and the config reference (docs/configuration.md) all read this table, so a key is
described exactly once. Values here are the production defaults (8x MI300X, Kimi K2.6 + DFlash).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kimi_dflash.core.envvars import (
    DEFAULT_KV_OBSERVE_INTERVAL_S,
    DEFAULT_KV_SCALE_FLOOR,
    DEFAULT_KV_SCALE_WARMUP_STEPS,
    KV_SCALE_MODE_OFF,
)
from kimi_dflash.demo.catalog import CHOICES as DEMO_CHOICES
from kimi_dflash.demo.catalog import NONE as NO_DEMO

KeyType = Literal["str", "int", "float", "bool", "enum", "path"]

# Meta key: the file named here (relative to the including file) is loaded first, then this file's keys
# override it. Not a setting of its own, so it is not in KEYS.
EXTENDS_KEY = "EXTENDS"


OptionStyle = Literal["value", "switch", "switch_or_no", "composite"]
# Values of another key that count as "not set" for VllmOption.only_with / only_without.
UNSET_VALUES = (None, False, "", "none", "off")


@dataclass(frozen=True)
class VllmOption:
    """The `vllm serve` option a key becomes, and when the launch plan writes it (plan.py reads this; the reverse
    map from an option to its key, which compatibility findings use to name the key to change, is built from it).

    style: value        `FLAG VALUE` (floats written with %g)
           switch       `FLAG` when the value is true
           switch_or_no `FLAG` when true, `--no-<flag>` when false (both stated: vLLM's default may change)
           composite    written by plan.py from this key and others (--speculative-config from the speculative
                        keys); named here so that the option maps back to its key
    """

    flag: str
    style: OptionStyle = "value"
    omit: tuple[object, ...] = ()  # values meaning "let vLLM decide": no option (None always omits a value option)
    gpu_only: bool = False  # not on DEVICE=cpu (the CPU build has no such setting, or refuses it)
    only_with: str | None = None  # another key that must be set (not in UNSET_VALUES)
    only_without: str | None = None  # another key that must be unset
    also: tuple[str, ...] = ()  # further options a composite writes
    note: str = ""  # what a composite writes, in words (the config reference shows it)

    @property
    def flags(self) -> tuple[str, ...]:
        negated = ("--no-" + self.flag.removeprefix("--"),) if self.style == "switch_or_no" else ()
        return (self.flag, *negated, *self.also)


@dataclass(frozen=True)
class Key:
    name: str
    type: KeyType
    default: object
    doc: str
    group: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    multiple_of: int | None = None
    secret: bool = False
    # An empty value means "unset / let vLLM decide" rather than an empty string.
    optional: bool = False
    vllm: VllmOption | None = None  # the vLLM option this key becomes (None: an environment variable, or ours)
    speculative_field: str | None = None  # the --speculative-config field it fills (with speculation on)


def _k(
    name: str,
    type_: KeyType,
    default: object,
    group: str,
    doc: str,
    *,
    choices: tuple[str, ...] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    multiple_of: int | None = None,
    secret: bool = False,
    optional: bool = False,
    vllm: VllmOption | None = None,
    speculative_field: str | None = None,
) -> Key:
    return Key(
        name=name,
        type=type_,
        default=default,
        group=group,
        doc=doc,
        choices=choices,
        minimum=minimum,
        maximum=maximum,
        multiple_of=multiple_of,
        secret=secret,
        optional=optional,
        vllm=vllm,
        speculative_field=speculative_field,
    )


KEYS: tuple[Key, ...] = (
    # --- where and what ---
    _k(
        "DEVICE",
        "enum",
        "rocm",
        "server",
        "Accelerator platform: rocm (MI300X), cuda (H200) or cpu (the demo, vLLM's CPU build).",
        choices=("rocm", "cuda", "cpu"),
    ),
    _k(
        "MODEL_DIR",
        "path",
        None,
        "model",
        "Local directory of the target checkpoint (config.json + safetensors). "
        "Relative paths resolve against the config file's directory.",
        optional=True,
    ),
    _k(
        "MODEL_REPO",
        "str",
        "moonshotai/Kimi-K2.6",
        "model",
        "Hugging Face repo id of the target; only used in download hints.",
    ),
    _k(
        "DRAFT_MODEL_DIR",
        "path",
        None,
        "model",
        "Local directory of the DFlash drafter checkpoint.",
        optional=True,
        speculative_field="model",
    ),
    _k(
        "DRAFT_MODEL_REPO",
        "str",
        "z-lab/Kimi-K2.5-DFlash",
        "model",
        "Hugging Face repo id of the drafter; only used in download hints.",
    ),
    _k(
        "PRESHARD_DIR",
        "path",
        None,
        "model",
        "A pre-sharded copy of MODEL_DIR for this TENSOR_PARALLEL_SIZE, "
        "written by payload/preshard_kimi26.py (vLLM's sharded_state format: each rank reads only its own slice). "
        "When set, vLLM loads it with --load-format sharded_state; MODEL_DIR must still name the source checkpoint, "
        "and preflight refuses a pre-shard made for another TP size, vLLM version, dtype or checkpoint.",
        optional=True,
        vllm=VllmOption("--load-format", "composite", note="sharded_state when set"),
    ),
    _k(
        "FABRICATE_DEMO_MODELS",
        "enum",
        NO_DEMO,
        "model",
        "Serve locally fabricated demo models (the CPU demo), "
        "built under the project cache on first use: "
        + "; ".join(f"{c.name}: {c.summary}" for c in DEMO_CHOICES.values())
        + f". {NO_DEMO}: serve MODEL_DIR / DRAFT_MODEL_DIR, which must otherwise stay empty.",
        choices=(NO_DEMO, *DEMO_CHOICES),
    ),
    _k(
        "SERVED_MODEL_NAME",
        "str",
        "kimi-k2.6-amd-dflash",
        "server",
        "Model name clients send in requests.",
        vllm=VllmOption("--served-model-name"),
    ),
    _k(
        "HOST",
        "str",
        "127.0.0.1",
        "server",
        "Address to bind (an IPv6 one without brackets: ::1). Localhost by default; set 0.0.0.0 only behind a "
        "firewall or with API_KEY set.",
        vllm=VllmOption("--host"),
    ),
    _k(
        "PORT",
        "int",
        8262,
        "server",
        "TCP port of the OpenAI-compatible server.",
        minimum=1,
        maximum=65535,
        vllm=VllmOption("--port"),
    ),
    _k(
        "API_KEY",
        "str",
        None,
        "server",
        "If set, clients must send 'Authorization: Bearer <key>'. Passed to vLLM "
        "through the environment (VLLM_API_KEY), never on the command line, and never printed.",
        optional=True,
        secret=True,
        vllm=VllmOption(
            "--middleware",
            "composite",
            also=("--disable-fastapi-docs",),
            note="the auth middleware when set; the key itself goes through VLLM_API_KEY",
        ),
    ),
    _k(
        "READY_TIMEOUT_S",
        "int",
        1800,
        "server",
        "How long `serve.sh --wait` waits for /health and a first completion (the real model loads in ~5 minutes).",
        minimum=10,
        maximum=86400,
    ),
    # --- engine ---
    _k(
        "TENSOR_PARALLEL_SIZE",
        "int",
        8,
        "engine",
        "Tensor-parallel degree (GPUs per replica).",
        minimum=1,
        maximum=64,
        vllm=VllmOption("--tensor-parallel-size", gpu_only=True),
    ),
    _k(
        "DISTRIBUTED_EXECUTOR_BACKEND",
        "enum",
        "auto",
        "engine",
        "--distributed-executor-backend: auto (vLLM picks: mp, one worker process per GPU, at TP > 1; uni at TP 1), "
        "mp, or uni (the one worker runs inside vLLM's engine-core process; TENSOR_PARALLEL_SIZE=1 only). "
        "On DEVICE=cpu vLLM turns uni into mp unless VLLM_ENABLE_V1_MULTIPROCESSING=0, which the plan then sets "
        "(for the server only: the engine core stays a process of its own). The CPU demo uses uni: one process "
        "fewer to import vLLM and torch, a faster start, the same tokens.",
        choices=("auto", "mp", "uni"),
        vllm=VllmOption("--distributed-executor-backend", omit=("auto",)),
    ),
    _k(
        "DTYPE",
        "enum",
        "auto",
        "engine",
        "Activation/weight dtype for non-quantized parts.",
        choices=("auto", "bfloat16", "float16", "float32"),
        vllm=VllmOption("--dtype", omit=("auto",)),
    ),
    _k(
        "KV_CACHE_DTYPE",
        "enum",
        "auto",
        "engine",
        "Target KV-cache dtype. fp8 roughly doubles KV capacity but needs "
        "KV scales (see KV_SCALE_MODE) and an explicit DRAFT_KV_CACHE_DTYPE.",
        choices=("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"),
        vllm=VllmOption("--kv-cache-dtype"),
    ),
    _k(
        "MAX_MODEL_LEN",
        "int",
        262144,
        "engine",
        "Maximum context length (prompt + output) in tokens.",
        minimum=64,
        maximum=1048576,
        vllm=VllmOption("--max-model-len"),
    ),
    _k(
        "MAX_NUM_SEQS",
        "int",
        32,
        "engine",
        "Maximum concurrent sequences in a batch.",
        minimum=1,
        maximum=4096,
        vllm=VllmOption("--max-num-seqs"),
    ),
    _k(
        "MAX_NUM_BATCHED_TOKENS",
        "int",
        32768,
        "engine",
        "Token budget per scheduler step (chunked prefill). "
        "32768 is the largest value the recipe ran on MI300X; it reported a fused-MoE crash above it (not "
        "reproduced here, cause unverified: see docs/compatibility.md), so larger values warn on GPUs.",
        minimum=16,
        maximum=1048576,
        vllm=VllmOption("--max-num-batched-tokens"),
    ),
    _k(
        "GPU_MEMORY_UTILIZATION",
        "float",
        0.90,
        "engine",
        "Fraction of each GPU's memory vLLM may use.",
        minimum=0.05,
        maximum=1.0,
        vllm=VllmOption("--gpu-memory-utilization", gpu_only=True),
    ),
    _k(
        "BLOCK_SIZE",
        "int",
        16,
        "engine",
        "KV-cache block size in tokens; a multiple of 16.",
        minimum=16,
        maximum=1024,
        multiple_of=16,
        vllm=VllmOption("--block-size"),
    ),
    _k(
        "ENFORCE_EAGER",
        "bool",
        True,
        "engine",
        "Run eagerly (no CUDA/HIP graphs, no torch.compile). The reference results were measured in eager mode.",
        vllm=VllmOption("--enforce-eager", "switch"),
    ),
    _k(
        "ENABLE_PREFIX_CACHING",
        "bool",
        False,
        "engine",
        "Reuse KV of shared prompt prefixes. Off for the "
        "reference benchmarks (prefix hits would inflate multi-turn numbers).",
        vllm=VllmOption("--enable-prefix-caching", "switch_or_no"),
    ),
    _k(
        "ALLOW_DFLASH_PREFIX_CACHING",
        "bool",
        False,
        "engine",
        "true: let ENABLE_PREFIX_CACHING=true run with DFlash on a vLLM without the fix for vllm #47930 (tokens "
        "restored from the prefix cache get no drafter context; acceptance falls toward 1.0 as prompts grow). "
        "`--check-vllm` then warns instead of refusing.",
    ),
    _k(
        "MOE_BACKEND",
        "enum",
        "auto",
        "engine",
        "--moe-backend: auto (vLLM picks; Kimi K2.6's INT4 WNA16 experts "
        "get vLLM's Triton WNA16 kernel on ROCm in every release), triton, or aiter (AITER fused MoE: unquantised / "
        "FP8 experts only; for WNA16 experts 0.20-0.26 on ROCm ignore it and 0.27+ refuse to start). "
        "`serve.sh --check-vllm` judges it against the checkpoint.",
        choices=("auto", "aiter", "triton"),
        vllm=VllmOption("--moe-backend", omit=("auto",)),
    ),
    _k(
        "TRUST_REMOTE_CODE",
        "bool",
        True,
        "model",
        "Allow the checkpoint's own modelling/tokenizer code (Kimi K2.6 ships a custom tokenizer).",
        vllm=VllmOption("--trust-remote-code", "switch"),
    ),
    _k(
        "TOOL_CALL_PARSER",
        "str",
        "kimi_k2",
        "api",
        "vLLM tool-call parser; empty disables tool calling.",
        optional=True,
        vllm=VllmOption("--tool-call-parser"),
    ),
    _k(
        "ENABLE_AUTO_TOOL_CHOICE",
        "bool",
        True,
        "api",
        "Let the model decide when to call tools (needs TOOL_CALL_PARSER).",
        vllm=VllmOption("--enable-auto-tool-choice", "switch", only_with="TOOL_CALL_PARSER"),
    ),
    _k(
        "REASONING_PARSER",
        "str",
        "kimi_k2",
        "api",
        "vLLM reasoning parser (splits thinking into reasoning_content); empty disables.",
        optional=True,
        vllm=VllmOption("--reasoning-parser"),
    ),
    _k(
        "LANGUAGE_MODEL_ONLY",
        "bool",
        False,
        "model",
        "Text-only serving: skip the vision encoder and give its VRAM to the KV cache.",
        vllm=VllmOption("--language-model-only", "switch"),
    ),
    _k(
        "MM_ENCODER_TP_MODE",
        "enum",
        "data",
        "model",
        "How the vision encoder is split across GPUs when LANGUAGE_MODEL_ONLY=false.",
        choices=("data", "weights"),
        vllm=VllmOption("--mm-encoder-tp-mode", gpu_only=True, only_without="LANGUAGE_MODEL_ONLY"),
    ),
    # --- speculative decoding ---
    _k(
        "SPECULATIVE_METHOD",
        "enum",
        "dflash",
        "speculative",
        "dflash; eagle3 (an EAGLE3 drafter, e.g. EAGLE3-MLA for Kimi: the CPU demo's configs/demo-cpu-eagle3.env); "
        "or none for the autoregressive baseline.",
        choices=("dflash", "eagle3", "none"),
        vllm=VllmOption("--speculative-config", "composite", note="JSON built from the speculative keys"),
        speculative_field="method",
    ),
    _k(
        "NUM_SPECULATIVE_TOKENS",
        "int",
        2,
        "speculative",
        "Tokens drafted per step (1 .. drafter block size). "
        "2 was best for Kimi K2.6: acceptance ~64 %/34 % per position; 8 collapses to 16 %.",
        minimum=1,
        maximum=64,
        speculative_field="num_speculative_tokens",
    ),
    _k(
        "DRAFTER_ROPE_FIX",
        "bool",
        True,
        "speculative",
        "Serve a DFlash drafter with z-lab's Kimi YaRN fields (factor 64, mscale = mscale_all_dim = 1.0, no "
        "attention_factor) with the RoPE amplitude it was trained with, 1.4159, on a vLLM that gives it 1.0 (0.30 "
        "and later, read from its source): the launcher serves it from a cached copy whose config.json adds "
        "rope_scaling.attention_factor (docs/patches.md). Does nothing where vLLM gives 1.4159 already. false: "
        "serve the drafter as its config.json says.",
    ),
    _k(
        "DRAFT_ATTENTION_BACKEND",
        "str",
        None,
        "speculative",
        "Attention backend for the drafter only "
        "(speculative_config.attention_backend, vLLM >= 0.21), e.g. TRITON_ATTN or ROCM_AITER_FA. Empty: vLLM "
        "decides.",
        optional=True,
        speculative_field="attention_backend",
    ),
    _k(
        "DRAFT_KV_CACHE_DTYPE",
        "enum",
        None,
        "speculative",
        "Drafter KV-cache dtype "
        "(speculative_config.kv_cache_dtype), separate from the target's. Required when KV_CACHE_DTYPE is fp8.",
        choices=("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"),
        optional=True,
        speculative_field="kv_cache_dtype",
    ),
    _k(
        "DRAFT_TENSOR_PARALLEL_SIZE",
        "int",
        None,
        "speculative",
        "Tensor-parallel degree of the drafter (default: same as the target).",
        minimum=1,
        maximum=64,
        optional=True,
        speculative_field="draft_tensor_parallel_size",
    ),
    _k(
        "PER_REQUEST_SPEC_METRICS",
        "enum",
        "off",
        "speculative",
        "--per-request-spec-decode-metrics (vLLM >= 0.29.0): summary puts each request's acceptance "
        "(metrics.speculative_decoding: mean acceptance length, draft acceptance rate, histogram, verify steps) on "
        "its response and on a stream's final usage chunk; detailed adds the per-step arrays. The benchmark turns "
        "them into distributions per level, turn, category and prompt length. Ignored when SPECULATIVE_METHOD=none.",
        choices=("off", "summary", "detailed"),
        vllm=VllmOption("--per-request-spec-decode-metrics", omit=("off",), only_with="SPECULATIVE_METHOD"),
    ),
    _k(
        "SYNTHETIC_ACCEPTANCE_RATES",
        "str",
        None,
        "speculative",
        "GPU benchmark aid, never for users: per-position acceptance rates, one per drafted token, non-increasing, "
        "e.g. 0.8,0.6,0.4. vLLM's synthetic rejection sampler (speculative_config.rejection_sample_method=synthetic, "
        "vLLM >= 0.20) then accepts drafts at these rates instead of checking them against the target, so the "
        "outputs are NOT the model's: it projects the speed a drafter with these rates would give on this box. "
        "Unconditional rates (a result's per_position list). Refused on the CPU build (its sampler raises at the "
        "first request). `qualify --project-acceptance` sets it for its projection step.",
        optional=True,
        speculative_field="synthetic_acceptance_rates",
    ),
    # --- FP8 KV scales (read by the project's vLLM plugin) ---
    _k(
        "KV_SCALE_MODE",
        "enum",
        KV_SCALE_MODE_OFF,
        "fp8",
        "FP8 KV scales for MLA: dynamic (running max at runtime), "
        "calibrated (from KV_SCALES_FILE), observe (record amax for calibration) or off.",
        choices=(KV_SCALE_MODE_OFF, "dynamic", "calibrated", "observe"),
    ),
    _k(
        "KV_SCALES_FILE",
        "path",
        None,
        "fp8",
        "Per-layer scales JSON written by kimi-dflash calibrate-kv, "
        "used by KV_SCALE_MODE=calibrated (refused if it was calibrated on another model).",
        optional=True,
    ),
    _k(
        "KV_SCALE_FLOOR",
        "float",
        DEFAULT_KV_SCALE_FLOOR,
        "fp8",
        "Lower bound on a dynamic scale (avoids a zero scale for layers that saw no data yet); must be > 0.",
        minimum=1e-12,
        maximum=1.0,
    ),
    _k(
        "KV_SCALE_WARMUP_STEPS",
        "int",
        DEFAULT_KV_SCALE_WARMUP_STEPS,
        "fp8",
        "KV writes per layer during which a dynamic scale follows the running amax; then it is frozen and the "
        "hook stops costing anything (0 = never frozen: refused on GPUs, see docs/fp8-kv.md for the trade).",
        minimum=0,
        maximum=1000000,
    ),
    _k(
        "KV_OBSERVE_DIR",
        "path",
        None,
        "fp8",
        "Where observe mode (and, optionally, the other modes) dump per-rank "
        "amax files for kimi-dflash calibrate-kv. Required with KV_SCALE_MODE=observe.",
        optional=True,
    ),
    _k(
        "KV_OBSERVE_INTERVAL",
        "float",
        DEFAULT_KV_OBSERVE_INTERVAL_S,
        "fp8",
        "Seconds between observe dumps.",
        minimum=0.1,
        maximum=3600.0,
    ),
    # --- platform environment ---
    _k("ROCM_USE_AITER", "bool", True, "rocm", "VLLM_ROCM_USE_AITER: AMD's AITER kernels (master switch)."),
    _k(
        "ROCM_USE_AITER_MLA",
        "bool",
        True,
        "rocm",
        "VLLM_ROCM_USE_AITER_MLA: MLA decode on AITER (ROCM_AITER_MLA). "
        "false: vLLM's Triton MLA, which keeps the decode query in BF16 against an FP8 cache (AITER MLA quantises "
        "it with q_scale 1.0).",
    ),
    _k(
        "ROCM_QUICK_REDUCE_QUANTIZATION",
        "enum",
        "INT4",
        "rocm",
        "VLLM_ROCM_QUICK_REDUCE_QUANTIZATION: quantized all-reduce for TP on MI300X.",
        choices=("NONE", "FP", "INT8", "INT6", "INT4"),
    ),
    _k(
        "CPU_KVCACHE_SPACE_GIB",
        "int",
        1,
        "cpu",
        "VLLM_CPU_KVCACHE_SPACE: KV-cache size on the CPU build, in GiB.",
        minimum=1,
        maximum=1024,
    ),
    _k(
        "CPU_PRELOAD_LIBS",
        "bool",
        True,
        "cpu",
        "LD_PRELOAD tcmalloc (libtcmalloc-minimal4) and Intel OpenMP "
        "(libiomp5, installed with vllm-cpu) into vLLM when they are found, as vLLM's CPU build asks; speculative "
        "decoding is much slower without Intel OpenMP. false: vLLM's own choice (PyTorch's libgomp).",
    ),
    _k(
        "EXTRA_VLLM_ARGS",
        "str",
        None,
        "server",
        "Extra `vllm serve` flags, split like a shell would (no expansion). For flags this schema does not cover; "
        "--api-key, --host and --port (in any spelling vLLM accepts) are refused: set API_KEY, HOST, PORT.",
        optional=True,
    ),
)

KEYS_BY_NAME: dict[str, Key] = {key.name: key for key in KEYS}
GROUP_TITLES: dict[str, str] = {
    "server": "Server",
    "model": "Model and checkpoints",
    "engine": "Engine",
    "api": "API features",
    "speculative": "Speculative decoding (DFlash)",
    "fp8": "FP8 KV-cache scales",
    "rocm": "ROCm environment",
    "cpu": "CPU build (demo)",
}
