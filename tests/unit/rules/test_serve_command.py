"""The vLLM features a `vllm serve` command line relies on, derived from the argv and env themselves."""

from __future__ import annotations

import json

import pytest

from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.rules.deployment import features_from_command
from kimi_dflash.rules.features import parse_feature, probe_features
from kimi_dflash.rules.source import VllmSource

# The command line the launcher builds for configs/production-fp8kv.env (as `serve.sh --dry-run` prints it).
PRODUCTION_ARGV = (
    "vllm",
    "serve",
    "/models/Kimi-K2.6",
    "--served-model-name",
    "kimi-k2.6-amd-dflash",
    "--host",
    "127.0.0.1",
    "--port",
    "8262",
    "--tensor-parallel-size",
    "8",
    "--gpu-memory-utilization",
    "0.9",
    "--kv-cache-dtype",
    "fp8",
    "--max-model-len",
    "262144",
    "--max-num-seqs",
    "64",
    "--max-num-batched-tokens",
    "32768",
    "--block-size",
    "16",
    "--enforce-eager",
    "--no-enable-prefix-caching",
    "--moe-backend",
    "aiter",
    "--trust-remote-code",
    "--tool-call-parser",
    "kimi_k2",
    "--enable-auto-tool-choice",
    "--reasoning-parser",
    "kimi_k2",
    "--mm-encoder-tp-mode",
    "data",
    "--speculative-config",
    json.dumps(
        {
            "method": "dflash",
            "model": "/models/Kimi-K2.5-DFlash",
            "num_speculative_tokens": 2,
            "kv_cache_dtype": "auto",
            "attention_backend": "TRITON_ATTN",
        }
    ),
)
PRODUCTION_ENV = {
    "VLLM_ROCM_USE_AITER": "1",
    "VLLM_ROCM_QUICK_REDUCE_QUANTIZATION": "INT4",
    "KIMI_DFLASH_KV_SCALE_MODE": "dynamic",
    "HIP_FORCE_DEV_KERNARG": "1",
}


def test_production_command_line():
    assert features_from_command(PRODUCTION_ARGV, PRODUCTION_ENV) == (
        "cli:--served-model-name",
        "cli:--host",
        "cli:--port",
        "cli:--tensor-parallel-size",
        "cli:--gpu-memory-utilization",
        "cli:--kv-cache-dtype",
        "kv_cache_dtype:fp8",
        "cli:--max-model-len",
        "cli:--max-num-seqs",
        "cli:--max-num-batched-tokens",
        "cli:--block-size",
        "cli:--enforce-eager",
        "cli:--no-enable-prefix-caching",
        "cli:--moe-backend",
        "moe_backend:aiter",
        "cli:--trust-remote-code",
        "cli:--tool-call-parser",
        "cli:--enable-auto-tool-choice",
        "cli:--reasoning-parser",
        "cli:--mm-encoder-tp-mode",
        "cli:--speculative-config",
        "speculative_method:dflash",
        "speculative_config.model",
        "speculative_config.num_speculative_tokens",
        "speculative_config.kv_cache_dtype",
        "speculative_config.attention_backend",
        "attention_backend:TRITON_ATTN",
        "env:VLLM_ROCM_QUICK_REDUCE_QUANTIZATION",
        "env:VLLM_ROCM_USE_AITER",
    )


def test_every_spelling_vllms_parser_accepts():
    argv = [
        "python",
        "-m",
        "kimi_dflash.vllm_entry",
        "serve",
        "/m",
        "--max_model_len=2048",
        "--moe-backend=auto",
        "--speculative-config.kv_cache_dtype",
        "bfloat16",
        "--speculative_config.method=dflash",
        "--speculative-config",
        "{not json",
        "--attention-backend",
        "ROCM_AITER_FA",
    ]
    assert features_from_command(argv) == (
        "cli:--max-model-len",
        "cli:--moe-backend",
        "cli:--speculative-config",
        "speculative_config.kv_cache_dtype",
        "kv_cache_dtype:bfloat16",
        "speculative_method:dflash",
        "cli:--attention-backend",
        "attention_backend:ROCM_AITER_FA",
    )


def test_without_a_serve_word_every_option_counts_and_names_parse():
    features = features_from_command(["--enforce-eager", "--", "--port", "1"], {"VLLM_PLUGINS": "kimi_dflash"})
    assert features == ("cli:--enforce-eager", "cli:--port", "env:VLLM_PLUGINS")
    for name in features_from_command(PRODUCTION_ARGV, PRODUCTION_ENV):
        parse_feature(name)


@pytest.mark.skipif(package_dir() is None, reason="vLLM is not installed in this Python")
def test_the_installed_vllm_knows_the_whole_production_command_line():
    source = VllmSource.from_package_dir(package_dir())
    outcomes = probe_features(source, features_from_command(PRODUCTION_ARGV, PRODUCTION_ENV))
    assert [o.name for o in outcomes if o.state != "present"] == []
