"""Every config key, declared once: the annotated attributes of `ConfigValues` (env-file name: the attribute's in
upper case; config/declare.py says how each is read). Validation, the launch plan, `--help` and the config
reference read `KEYS`; a validated config is an instance (`config.typed.port` is an int). Values here are the
production defaults (8x MI300X, Kimi K2.6 + DFlash)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

from kimi_dflash.config.declare import Key, VllmOption, key, keys_of
from kimi_dflash.core.envvars import (
    DEFAULT_KV_OBSERVE_INTERVAL_S,
    DEFAULT_KV_SCALE_FLOOR,
    DEFAULT_KV_SCALE_WARMUP_STEPS,
    KV_SCALE_MODE_OFF,
)
from kimi_dflash.core.options import DEFAULT_PORT, PORT
from kimi_dflash.core.redaction import redact_command
from kimi_dflash.demo.catalog import CHOICES as DEMO_CHOICES
from kimi_dflash.demo.catalog import NONE as NO_DEMO

ROPE_ENGINE, ROPE_LEGACY = "engine", "legacy"  # DRAFTER_ROPE_AMPLITUDE's words (rules/rope_amplitude.py)


def rope_amplitude_choice(text: str) -> str | float | None:
    """DRAFTER_ROPE_AMPLITUDE: "engine", "legacy" or a number (0 < amplitude <= 10); None when it is none of them."""
    try:
        return text if text in (ROPE_ENGINE, ROPE_LEGACY) else (value if 0 < (value := float(text)) <= 10 else None)
    except ValueError:
        return None


# Meta key, not in KEYS: the file it names (relative to this one) is loaded first, and this file's keys override it.
EXTENDS_KEY = "EXTENDS"

KvCacheDtype = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"]


@dataclass(frozen=True)
class ConfigValues:
    """A validated config's values (defaults filled in; an empty optional key is None), in launch-plan order."""

    device: Literal["rocm", "cuda", "cpu"] = key(
        "rocm", "server", "Accelerator platform: rocm (MI300X), cuda (H200) or cpu (the demo, vLLM's CPU build)."
    )
    model_dir: Path | None = key(
        None,
        "model",
        "Local directory of the target checkpoint (config.json + safetensors). Relative paths resolve against the "
        "config file's directory.",
    )
    model_repo: str = key(
        "moonshotai/Kimi-K2.6", "model", "Hugging Face repo id of the target; only used in download hints."
    )
    draft_model_dir: Path | None = key(
        None, "model", "Local directory of the DFlash drafter checkpoint.", speculative_field="model"
    )
    draft_model_repo: str = key(
        "z-lab/Kimi-K2.5-DFlash", "model", "Hugging Face repo id of the drafter; only used in download hints."
    )
    preshard_dir: Path | None = key(
        None,
        "model",
        "A pre-sharded copy of MODEL_DIR for this TENSOR_PARALLEL_SIZE, written by kimi-dflash preshard (vLLM's "
        "sharded_state format: each rank reads only its own slice). When set, vLLM loads it with --load-format "
        "sharded_state; MODEL_DIR must still name the source checkpoint, and preflight refuses a pre-shard made for "
        "another TP size, vLLM version, dtype or checkpoint.",
        vllm=VllmOption("--load-format", "composite", note="sharded_state when set"),
    )
    # NO_DEMO and the demo catalog's choices (tests/unit/config/test_config_schema.py keeps them the same)
    fabricate_demo_models: Literal[
        "none", "kimi", "kimi-int4", "kimi-eagle3", "kimi-cuda", "kimi-int4-cuda", "qwen3"
    ] = key(
        NO_DEMO,
        "model",
        "Serve locally fabricated demo models (the CPU demo), built under the project cache on first use: "
        + "; ".join(f"{c.name}: {c.summary}" for c in DEMO_CHOICES.values())
        + f". {NO_DEMO}: serve MODEL_DIR / DRAFT_MODEL_DIR, which must otherwise stay empty.",
    )
    served_model_name: str = key(
        "kimi-k2.6-amd-dflash", "server", "Model name clients send in requests.", vllm=VllmOption("--served-model-name")
    )
    host: str = key(
        "127.0.0.1",
        "server",
        "Address to bind (an IPv6 one without brackets: ::1). Localhost by default; set 0.0.0.0 only behind a "
        "firewall or with API_KEY set.",
        vllm=VllmOption("--host"),
    )
    port: int = key(
        DEFAULT_PORT, "server", "TCP port of the OpenAI-compatible server.", **PORT, vllm=VllmOption("--port")
    )
    api_key: str | None = key(
        None,
        "server",
        "If set, clients must send 'Authorization: Bearer <key>'. Passed to vLLM through the environment "
        "(VLLM_API_KEY), never on the command line, and never printed.",
        secret=True,
        vllm=VllmOption(
            "--middleware",
            "composite",
            also=("--disable-fastapi-docs",),
            note="the auth middleware when set; the key itself goes through VLLM_API_KEY",
        ),
    )
    ready_timeout_s: int = key(
        1800,
        "server",
        "How long `serve.sh --wait` waits for /health and a first completion (the real model loads in ~5 minutes).",
        minimum=10,
        maximum=86400,
    )
    tensor_parallel_size: int = key(
        8,
        "engine",
        "Tensor-parallel degree (GPUs per replica).",
        minimum=1,
        maximum=64,
        vllm=VllmOption("--tensor-parallel-size", gpu_only=True),
    )
    distributed_executor_backend: Literal["auto", "mp", "uni"] = key(
        "auto",
        "engine",
        "--distributed-executor-backend: auto (vLLM picks: mp, one worker process per GPU, at TP > 1; uni at TP 1), "
        "mp, or uni (the one worker runs inside vLLM's engine-core process; TENSOR_PARALLEL_SIZE=1 only). On "
        "DEVICE=cpu vLLM turns uni into mp unless VLLM_ENABLE_V1_MULTIPROCESSING=0, which the plan then sets (for the "
        "server only: the engine core stays a process of its own). The CPU demo uses uni: one process fewer to "
        "import vLLM and torch, a faster start, the same tokens.",
        vllm=VllmOption("--distributed-executor-backend", omit=("auto",)),
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = key(
        "auto", "engine", "Activation/weight dtype for non-quantized parts.", vllm=VllmOption("--dtype", omit=("auto",))
    )
    kv_cache_dtype: KvCacheDtype = key(
        "auto",
        "engine",
        "Target KV-cache dtype. fp8 roughly doubles KV capacity but needs KV scales (see KV_SCALE_MODE) and an "
        "explicit DRAFT_KV_CACHE_DTYPE.",
        vllm=VllmOption("--kv-cache-dtype"),
    )
    max_model_len: int = key(
        262144,
        "engine",
        "Maximum context length (prompt + output) in tokens.",
        minimum=64,
        maximum=1048576,
        vllm=VllmOption("--max-model-len"),
    )
    max_num_seqs: int = key(
        32,
        "engine",
        "Maximum concurrent sequences in a batch.",
        minimum=1,
        maximum=4096,
        vllm=VllmOption("--max-num-seqs"),
    )
    max_num_batched_tokens: int = key(
        32768,
        "engine",
        "Token budget per scheduler step (chunked prefill). 32768 is the largest value the recipe ran on MI300X; it "
        "reported a fused-MoE crash above it (not reproduced here, cause unverified: see docs/compatibility.md), so "
        "larger values warn on GPUs.",
        minimum=16,
        maximum=1048576,
        vllm=VllmOption("--max-num-batched-tokens"),
    )
    gpu_memory_utilization: float = key(
        0.9,
        "engine",
        "Fraction of each GPU's memory vLLM may use.",
        minimum=0.05,
        maximum=1.0,
        vllm=VllmOption("--gpu-memory-utilization", gpu_only=True),
    )
    block_size: int = key(
        16,
        "engine",
        "KV-cache block size in tokens; a multiple of 16.",
        minimum=16,
        maximum=1024,
        multiple_of=16,
        vllm=VllmOption("--block-size"),
    )
    enforce_eager: bool = key(
        True,
        "engine",
        "Run eagerly (no CUDA/HIP graphs, no torch.compile). The reference results were measured in eager mode.",
        vllm=VllmOption("--enforce-eager", "switch"),
    )
    enable_prefix_caching: bool = key(
        False,
        "engine",
        "Reuse KV of shared prompt prefixes. Off for the reference benchmarks (prefix hits would inflate multi-turn "
        "numbers).",
        vllm=VllmOption("--enable-prefix-caching", "switch_or_no"),
    )
    allow_dflash_prefix_caching: bool = key(
        False,
        "engine",
        "true: let ENABLE_PREFIX_CACHING=true run with DFlash on a vLLM without the fix for vllm #47930 (tokens "
        "restored from the prefix cache get no drafter context; acceptance falls toward 1.0 as prompts grow). "
        "`--check-vllm` then warns instead of refusing.",
    )
    moe_backend: Literal["auto", "aiter", "triton"] = key(
        "auto",
        "engine",
        "--moe-backend: auto (vLLM picks; Kimi K2.6's INT4 WNA16 experts get vLLM's Triton WNA16 kernel on ROCm in "
        "every release), triton, or aiter (AITER fused MoE: unquantised / FP8 experts only; for WNA16 experts "
        "0.20-0.26 on ROCm ignore it and 0.27+ refuse to start). `serve.sh --check-vllm` judges it against the "
        "checkpoint.",
        vllm=VllmOption("--moe-backend", omit=("auto",)),
    )
    trust_remote_code: bool = key(
        True,
        "model",
        "Allow the checkpoint's own modelling/tokenizer code (Kimi K2.6 ships a custom tokenizer).",
        vllm=VllmOption("--trust-remote-code", "switch"),
    )
    tool_call_parser: str | None = key(
        "kimi_k2", "api", "vLLM tool-call parser; empty disables tool calling.", vllm=VllmOption("--tool-call-parser")
    )
    enable_auto_tool_choice: bool = key(
        True,
        "api",
        "Let the model decide when to call tools (needs TOOL_CALL_PARSER).",
        vllm=VllmOption("--enable-auto-tool-choice", "switch", only_with="TOOL_CALL_PARSER"),
    )
    reasoning_parser: str | None = key(
        "kimi_k2",
        "api",
        "vLLM reasoning parser (splits thinking into reasoning_content); empty disables.",
        vllm=VllmOption("--reasoning-parser"),
    )
    language_model_only: bool = key(
        False,
        "model",
        "Text-only serving: skip the vision encoder and give its VRAM to the KV cache.",
        vllm=VllmOption("--language-model-only", "switch"),
    )
    mm_encoder_tp_mode: Literal["data", "weights"] = key(
        "data",
        "model",
        "How the vision encoder is split across GPUs when LANGUAGE_MODEL_ONLY=false.",
        vllm=VllmOption("--mm-encoder-tp-mode", gpu_only=True, only_without="LANGUAGE_MODEL_ONLY"),
    )
    speculative_method: Literal["dflash", "eagle3", "dspark", "none"] = key(
        "dflash",
        "speculative",
        "dflash; eagle3 (an EAGLE3 drafter, e.g. EAGLE3-MLA for Kimi: the CPU demo's configs/demo-cpu-eagle3.env); "
        "dspark (a DSpark block drafter, vLLM >= 0.25, Model Runner V2 only: configs/production-dspark.env); or none "
        "for the autoregressive baseline.",
        vllm=VllmOption("--speculative-config", "composite", note="JSON built from the speculative keys"),
        speculative_field="method",
    )
    num_speculative_tokens: int = key(
        2,
        "speculative",
        "Tokens drafted per step (1 .. drafter block size). 2 was best for Kimi K2.6: acceptance ~64 %/34 % per "
        "position; 8 collapses to 16 %.",
        minimum=1,
        maximum=64,
        speculative_field="num_speculative_tokens",
    )
    num_speculative_tokens_per_batch_size: str | None = key(
        None,
        "speculative",
        "Depth by load: k per batch size (speculative_config.num_speculative_tokens_per_batch_size, vLLM >= 0.24), as "
        "ranges of batch sizes FIRST-LAST:K from 1 up, the last one open, e.g. 1-4:4,5-16:3,17-:2; each k <= "
        "NUM_SPECULATIVE_TOKENS, which sizes the drafter. `kimi-dflash advise --schedule` writes one from a sweep; "
        "`serve.sh --check-vllm` refuses it where the release, the model runner or data parallelism cannot take it.",
        speculative_field="num_speculative_tokens_per_batch_size",
    )
    drafter_rope_amplitude: str = key(
        ROPE_LEGACY,
        "speculative",
        "The RoPE amplitude a DFlash drafter with yarn rope fields is served with: legacy = what vLLM up to 0.29 gave "
        "(0.1 ln factor + 1: 1.4159 for z-lab's Kimi drafters, the amplitude their published acceptance was measured "
        "with), engine = what the installed vLLM gives (1.0 from 0.30), or a number. Where the engine's differs, the "
        "launcher serves a cached copy whose config.json states attention_factor (docs/patches.md).",
    )
    drafter_rope_fix: bool | None = key(None, "speculative", "Deprecated: DRAFTER_ROPE_AMPLITUDE (true = legacy).")
    draft_attention_backend: str | None = key(
        None,
        "speculative",
        "Attention backend for the drafter only (speculative_config.attention_backend, vLLM >= 0.21), e.g. "
        "TRITON_ATTN or ROCM_AITER_FA. Empty: vLLM decides, except that on ROCm a drafter whose config.json has "
        "sliding-window layers gets TRITON_ATTN (vllm #53323).",
        speculative_field="attention_backend",
    )
    draft_kv_cache_dtype: KvCacheDtype | None = key(
        None,
        "speculative",
        "Drafter KV-cache dtype (speculative_config.kv_cache_dtype), separate from the target's. Required when "
        "KV_CACHE_DTYPE is fp8.",
        speculative_field="kv_cache_dtype",
    )
    draft_tensor_parallel_size: int | None = key(
        None,
        "speculative",
        "Tensor-parallel degree of the drafter (default: same as the target).",
        minimum=1,
        maximum=64,
        speculative_field="draft_tensor_parallel_size",
    )
    per_request_spec_metrics: Literal["off", "summary", "detailed"] = key(
        "off",
        "speculative",
        "--per-request-spec-decode-metrics (vLLM >= 0.29.0): summary puts each request's acceptance "
        "(metrics.speculative_decoding: mean acceptance length, draft acceptance rate, histogram, verify steps) on "
        "its response and on a stream's final usage chunk; detailed adds the per-step arrays. The benchmark turns "
        "them into distributions per level, turn, category and prompt length. Ignored when SPECULATIVE_METHOD=none.",
        vllm=VllmOption("--per-request-spec-decode-metrics", omit=("off",), only_with="SPECULATIVE_METHOD"),
    )
    synthetic_acceptance_rates: str | None = key(
        None,
        "speculative",
        "GPU benchmark aid, never for users: per-position acceptance rates, one per drafted token, non-increasing, "
        "e.g. 0.8,0.6,0.4. vLLM's synthetic rejection sampler (speculative_config.rejection_sample_method=synthetic, "
        "vLLM >= 0.20) then accepts drafts at these rates instead of checking them against the target, so the outputs "
        "are NOT the model's: it projects the speed a drafter with these rates would give on this box. Unconditional "
        "rates (a result's per_position list). Refused on the CPU build (its sampler raises at the first request). "
        "`qualify --project-acceptance` sets it for its projection step.",
        speculative_field="synthetic_acceptance_rates",
    )
    kv_scale_mode: Literal["off", "dynamic", "calibrated", "observe"] = key(
        KV_SCALE_MODE_OFF,
        "fp8",
        "FP8 KV scales for MLA: dynamic (running max at runtime), calibrated (from KV_SCALES_FILE), observe (record "
        "amax for calibration) or off.",
    )
    kv_scales_file: Path | None = key(
        None,
        "fp8",
        "Per-layer scales JSON written by kimi-dflash calibrate-kv, used by KV_SCALE_MODE=calibrated (refused if it "
        "was calibrated on another model).",
    )
    kv_scale_floor: float = key(
        DEFAULT_KV_SCALE_FLOOR,
        "fp8",
        "Lower bound on a dynamic scale (avoids a zero scale for layers that saw no data yet); must be > 0.",
        minimum=1e-12,
        maximum=1.0,
    )
    kv_scale_warmup_steps: int = key(
        DEFAULT_KV_SCALE_WARMUP_STEPS,
        "fp8",
        "KV writes per layer during which a dynamic scale follows the running amax; then it is frozen and the hook "
        "stops costing anything (0 = never frozen: refused on GPUs, see docs/fp8-kv.md for the trade).",
        minimum=0,
        maximum=1000000,
    )
    kv_observe_dir: Path | None = key(
        None,
        "fp8",
        "Where observe mode (and, optionally, the other modes) dump per-rank amax files for kimi-dflash calibrate-kv. "
        "Required with KV_SCALE_MODE=observe.",
    )
    kv_observe_interval: float = key(
        DEFAULT_KV_OBSERVE_INTERVAL_S, "fp8", "Seconds between observe dumps.", minimum=0.1, maximum=3600.0
    )
    rocm_use_aiter: bool = key(True, "rocm", "VLLM_ROCM_USE_AITER: AMD's AITER kernels (master switch).")
    rocm_use_aiter_mla: bool = key(
        True,
        "rocm",
        "VLLM_ROCM_USE_AITER_MLA: MLA decode on AITER (ROCM_AITER_MLA). false: vLLM's Triton MLA, which keeps the "
        "decode query in BF16 against an FP8 cache (AITER MLA quantises it with q_scale 1.0).",
    )
    rocm_quick_reduce_quantization: Literal["NONE", "FP", "INT8", "INT6", "INT4"] = key(
        "INT4", "rocm", "VLLM_ROCM_QUICK_REDUCE_QUANTIZATION: quantized all-reduce for TP on MI300X."
    )
    cpu_kvcache_space_gib: int = key(
        1, "cpu", "VLLM_CPU_KVCACHE_SPACE: KV-cache size on the CPU build, in GiB.", minimum=1, maximum=1024
    )
    cpu_preload_libs: bool = key(
        True,
        "cpu",
        "LD_PRELOAD tcmalloc (libtcmalloc-minimal4) and Intel OpenMP (libiomp5, installed with vllm-cpu) into vLLM "
        "when they are found, as vLLM's CPU build asks; speculative decoding is much slower without Intel OpenMP. "
        "false: vLLM's own choice (PyTorch's libgomp).",
    )
    extra_vllm_args: str | None = key(
        None,
        "server",
        "Extra `vllm serve` flags, split like a shell would (no expansion). For flags this schema does not cover; "
        "--host, --port and vLLM's secret options (--api-key, --hf-token, --watermark-config), in any spelling vLLM "
        "accepts, are refused: set HOST, PORT, API_KEY, HF_TOKEN. Stored and shown with URL credentials masked.",
        redact=redact_command,
    )

    @property
    def speculative(self) -> bool:
        return self.speculative_method != "none"

    @property
    def drafter_rope_choice(self) -> str | float:
        """DRAFTER_ROPE_AMPLITUDE, or the deprecated DRAFTER_ROPE_FIX (config/rules.py refuses both, or a bad one)."""
        if self.drafter_rope_fix is not None:
            return ROPE_LEGACY if self.drafter_rope_fix else ROPE_ENGINE
        return rope_amplitude_choice(self.drafter_rope_amplitude) or ROPE_LEGACY

    @property
    def demo_models(self) -> str | None:
        """The fabricated demo choice this config serves (FABRICATE_DEMO_MODELS), or None."""
        return None if self.fabricate_demo_models == NO_DEMO else self.fabricate_demo_models


KEYS: tuple[Key, ...] = keys_of(ConfigValues)
KEYS_BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}
# KEY.PORT == "PORT": code names a key through it, never in quotes (tests/unit/config/test_key_names.py), so a name
# the schema does not declare raises AttributeError where it is read, and that test finds it in code that never ran.
KEY = SimpleNamespace(**{name: name for name in KEYS_BY_NAME})


def shown_values(values: Mapping[str, object]) -> dict[str, str]:
    """Config values as text a file may keep or a message show (Key.shown: no secret); other names as they are."""
    return {k: KEYS_BY_NAME[k].shown(v) if k in KEYS_BY_NAME else str(v) for k, v in values.items()}


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
