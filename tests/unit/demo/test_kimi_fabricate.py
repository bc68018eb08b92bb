"""The miniature Kimi K2.6 bundle on disk: Kimi's checkpoint layout, config.json shape, INT4 packing, tokenizer,
drafter config, determinism (no vLLM; torch / transformers / compressed-tensors only where a check needs them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="needs the cpu extra (launchers/setup-cpu.sh)")

from tokenizers import Tokenizer

from kimi_dflash.demo import DemoModels, ensure_demo_models
from kimi_dflash.demo.bundle import MANIFEST, RECIPES, bundle_problem
from kimi_dflash.demo.kimi import int4, layout
from kimi_dflash.demo.kimi import tokenizer as kimi_tokenizer
from kimi_dflash.demo.kimi.checkpoint import INDEX_FILE, bfloat16_bits, safetensors_bytes, tensor
from kimi_dflash.demo.kimi.int4 import quantization_config
from repo_paths import REPO_ROOT

PREFIX = "language_model."


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def kimi(tmp_path_factory: pytest.TempPathFactory) -> DemoModels:
    return ensure_demo_models(tmp_path_factory.mktemp("demo"), choice="kimi")


@pytest.fixture(scope="module")
def kimi_int4(kimi: DemoModels) -> DemoModels:
    return ensure_demo_models(kimi.root, choice="kimi-int4")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def headers(directory: Path) -> dict[str, dict]:
    """name -> {dtype, shape} over every shard, from the safetensors headers (the format as stored)."""
    found: dict[str, dict] = {}
    for shard in sorted(directory.glob("*.safetensors")):
        raw = shard.read_bytes()
        header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
        header.pop("__metadata__")
        found.update({name: {"dtype": v["dtype"], "shape": tuple(v["shape"])} for name, v in header.items()})
    return found


def load_all(directory: Path) -> dict:
    from safetensors.torch import load_file

    weights = {}
    for shard in sorted(directory.glob("*.safetensors")):
        weights.update(load_file(str(shard)))
    return weights


def test_both_targets_share_one_bundle_and_drafter(kimi: DemoModels, kimi_int4: DemoModels) -> None:
    assert kimi.built is True and kimi_int4.built is False  # one fabrication makes both
    assert kimi.bundle_dir == kimi_int4.bundle_dir and kimi.drafter_dir == kimi_int4.drafter_dir
    assert kimi.target_dir.name == "target" and kimi_int4.target_dir.name == "target-int4"
    assert bundle_problem(kimi.bundle_dir, RECIPES[kimi.choice.bundle].fabrication_version) is None
    manifest = kimi.manifest()
    assert set(manifest["files"]) == set(tree(kimi.bundle_dir)) - {MANIFEST}
    assert manifest["summary"]["architecture"] == "KimiK25ForConditionalGeneration"


def test_build_in_a_fresh_process_is_byte_identical(kimi: DemoModels, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "payload" / "fabricate_demo_models.py"), "--root", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert tree(tmp_path / "kimi") == tree(kimi.bundle_dir)


def test_config_json_has_kimi_k26s_shape(kimi: DemoModels) -> None:
    config = read_json(kimi.target_dir / "config.json")
    assert config["architectures"] == ["KimiK25ForConditionalGeneration"] and config["model_type"] == "kimi_k25"
    text = config["text_config"]
    assert text["architectures"] == ["DeepseekV3ForCausalLM"] and text["model_type"] == "kimi_k2"
    # MLA, with the two sizes vLLM's CPU kernel needs kept at Kimi's values
    assert (text["kv_lora_rank"], text["qk_rope_head_dim"]) == (512, 64) and text["q_lora_rank"]
    # Kimi's routing: sigmoid scores, noaux_tc with a correction bias, one group, a shared expert, layer 0 dense
    assert (text["scoring_func"], text["topk_method"], text["n_group"], text["topk_group"]) == (
        "sigmoid",
        "noaux_tc",
        1,
        1,
    )
    assert text["n_shared_experts"] == 1 and text["first_k_dense_replace"] == 1 and text["norm_topk_prob"] is True
    assert text["routed_scaling_factor"] == 2.827 and text["rope_scaling"]["type"] == "yarn"
    assert "quantization_config" not in text
    tokenizer = Tokenizer.from_file(str(kimi.target_dir / "tokenizer.json"))
    vocab = text["vocab_size"]
    media = {
        key: config[key]
        for key in (
            "media_placeholder_token_id",
            "image_token_id",
            "video_token_id",
            "vision_start_token_id",
            "vision_end_token_id",
        )
    }
    assert all(0 <= token_id < vocab for token_id in media.values()), media
    assert config["media_placeholder_token_id"] == config["image_token_id"] == tokenizer.token_to_id("<|media_pad|>")
    assert read_json(kimi.target_dir / "preprocessor_config.json")["media_proc_cfg"]["patch_size"] == 14
    assert read_json(kimi.target_dir / "generation_config.json")["eos_token_id"] == tokenizer.token_to_id("<|im_end|>")


def test_transformers_reads_the_wrapper_config(kimi: DemoModels) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.from_pretrained(str(kimi.target_dir))
    assert type(config).__name__ == "Kimi_K25Config"
    assert type(config.text_config).__name__ == "DeepseekV3Config" and config.text_config.kv_lora_rank == 512
    assert config.vision_config.num_hidden_layers == 1  # the tiny tower, not the 27-layer default


def test_weights_use_kimi_checkpoint_names_and_dtypes(kimi: DemoModels) -> None:
    found = headers(kimi.target_dir)
    index = read_json(kimi.target_dir / INDEX_FILE)["weight_map"]
    assert set(index) == set(found)
    assert sorted(set(index.values())) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert {name.split(".")[0] for name in found} == {"language_model", "vision_tower", "mm_projector"}
    text = read_json(kimi.target_dir / "config.json")["text_config"]
    hidden, experts = text["hidden_size"], text["n_routed_experts"]
    layer1 = f"{PREFIX}model.layers.1"
    assert found[f"{PREFIX}model.embed_tokens.weight"] == {"dtype": "BF16", "shape": (text["vocab_size"], hidden)}
    assert found[f"{PREFIX}lm_head.weight"]["shape"] == (text["vocab_size"], hidden)
    assert found[f"{layer1}.self_attn.kv_a_proj_with_mqa.weight"]["shape"] == (512 + 64, hidden)
    assert found[f"{layer1}.self_attn.kv_b_proj.weight"]["shape"] == (
        text["num_attention_heads"] * (text["qk_nope_head_dim"] + text["v_head_dim"]),
        512,
    )
    assert found[f"{layer1}.mlp.gate.weight"] == {"dtype": "BF16", "shape": (experts, hidden)}
    assert found[f"{layer1}.mlp.gate.e_score_correction_bias"] == {"dtype": "F32", "shape": (experts,)}
    assert found[f"{layer1}.mlp.experts.{experts - 1}.down_proj.weight"]["shape"] == (
        hidden,
        text["moe_intermediate_size"],
    )
    assert f"{layer1}.mlp.shared_experts.up_proj.weight" in found
    assert f"{PREFIX}model.layers.0.mlp.gate_proj.weight" in found  # layer 0 is dense
    assert not any(".layers.0.mlp.experts." in name for name in found)
    assert {v["dtype"] for k, v in found.items() if not k.endswith("e_score_correction_bias")} == {"BF16"}


def test_int4_checkpoint_packs_only_the_routed_experts(kimi: DemoModels, kimi_int4: DemoModels) -> None:
    plain, packed = headers(kimi.target_dir), headers(kimi_int4.target_dir)
    config = read_json(kimi_int4.target_dir / "config.json")
    assert config["text_config"]["quantization_config"] == quantization_config()
    weights = config["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["group_size"], weights["symmetric"], weights["strategy"]) == (
        4,
        32,
        True,
        "group",
    )
    assert config["text_config"]["quantization_config"]["format"] == "pack-quantized"
    for name, spec in plain.items():
        if ".mlp.experts." in name:
            module = name[: -len(".weight")]
            rows, cols = spec["shape"]
            assert packed[f"{module}.weight_packed"] == {"dtype": "I32", "shape": (rows, cols // 8)}
            assert packed[f"{module}.weight_scale"] == {"dtype": "BF16", "shape": (rows, cols // 32)}
            assert packed[f"{module}.weight_shape"] == {"dtype": "I64", "shape": (2,)}
            assert name not in packed
        else:
            assert packed[name] == spec, name  # attention, shared experts, dense MLP, router: untouched
    assert len(packed) == len(plain) + 2 * sum(".mlp.experts." in name for name in plain)


def test_int4_experts_dequantize_exactly_to_the_served_experts(kimi: DemoModels, kimi_int4: DemoModels) -> None:
    """compressed-tensors' own decompressor (what produced and reads Kimi's checkpoint) gives back, bit for bit,
    the bfloat16 experts the serving checkpoint holds."""
    pytest.importorskip("torch")
    ct = pytest.importorskip("compressed_tensors.compressors.pack_quantized.helpers")
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    plain, packed = load_all(kimi.target_dir), load_all(kimi_int4.target_dir)
    checked = 0
    for name, value in plain.items():
        if ".mlp.experts." not in name:
            assert packed[name].equal(value), name
            continue
        module = name[: -len(".weight")]
        shape = packed[f"{module}.weight_shape"].tolist()
        values = ct.unpack_from_int32(packed[f"{module}.weight_packed"], 4, shape)
        weight = dequantize(x_q=values, scale=packed[f"{module}.weight_scale"], zero_point=None)
        assert weight.to(value.dtype).equal(value), name
        checked += 1
    assert checked == 3 * layout.N_ROUTED_EXPERTS * (layout.TARGET_LAYERS - layout.FIRST_K_DENSE_REPLACE)


def test_int4_packing_round_trips_and_refuses_off_grid_weights() -> None:
    rng = np.random.default_rng(0)
    matrix = int4.snap_to_int4_grid(rng.normal(size=(4, 64)))
    values, scales = int4.quantize(matrix)
    assert values.min() >= -8 and values.max() <= 7
    lanes = (int4.pack_int32(values).view(np.uint32).astype(np.int64)[:, :, None] >> (np.arange(8) * 4)) & 0xF
    assert np.array_equal(lanes.reshape(4, -1) - 8, values)  # value + 8 in 4-bit lanes, lowest lane first
    assert np.array_equal(int4.dequantize(values, scales), matrix)
    stored = (bfloat16_bits(matrix).astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(stored, matrix.astype(np.float32))  # exact in bfloat16 too
    tensors = int4.compressed_expert_tensors("experts.0.up_proj.weight", matrix)
    assert sorted(tensors) == [
        "experts.0.up_proj.weight_packed",
        "experts.0.up_proj.weight_scale",
        "experts.0.up_proj.weight_shape",
    ]
    with pytest.raises(ValueError, match="not on the INT4 grid"):
        int4.compressed_expert_tensors("experts.0.up_proj.weight", matrix + 1e-3)


def test_checkpoint_writer_matches_torch_and_safetensors() -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load

    values = np.random.default_rng(1).normal(size=(3, 5)) * 10
    written = load(
        safetensors_bytes({"a": tensor(values, "BF16"), "b": tensor(values, "F32"), "c": tensor(np.arange(4), "I64")})
    )
    assert written["a"].dtype == torch.bfloat16
    assert written["a"].equal(torch.tensor(values, dtype=torch.float32).to(torch.bfloat16))  # same rounding
    assert written["b"].equal(torch.tensor(values, dtype=torch.float32))
    assert written["c"].tolist() == [0, 1, 2, 3]


def test_tokenizer_has_kimis_special_block_and_chat_format(kimi: DemoModels) -> None:
    tokenizer = Tokenizer.from_file(str(kimi.target_dir / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == layout.VOCAB_SIZE
    for token, offset in kimi_tokenizer.SPECIAL_OFFSETS.items():
        assert tokenizer.token_to_id(token) == layout.SPECIAL_BASE + offset
        assert tokenizer.encode(f"a{token}b").ids[1] == layout.SPECIAL_BASE + offset  # never split
    text = "Grüße, 世界! 🚀 tabs\tand\nnewlines"
    assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) == text
    transformers = pytest.importorskip("transformers")
    auto = transformers.AutoTokenizer.from_pretrained(str(kimi.target_dir))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "More"},
    ]
    rendered = auto.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == (
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>Hello<|im_end|><|im_user|>user<|im_middle|>More"
        "<|im_end|><|im_assistant|>assistant<|im_middle|>"
    )
    thinking = auto.apply_chat_template(messages[1:2], add_generation_prompt=True, tokenize=False, thinking=True)
    assert thinking.endswith("<|im_middle|><think>")
    with pytest.raises(Exception, match="not narrator"):
        auto.apply_chat_template([{"role": "narrator", "content": "x"}], tokenize=False)


def test_drafter_config_follows_production_except_its_cpu_geometry(kimi: DemoModels) -> None:
    drafter = read_json(kimi.drafter_dir / "config.json")
    target = read_json(kimi.target_dir / "config.json")["text_config"]
    production = read_json(REPO_ROOT / "src" / "kimi_dflash" / "data" / "checkpoints" / "kimi-k2.5-dflash.json")
    assert drafter["architectures"] == production["architectures"] and drafter["model_type"] == "qwen3"
    assert drafter["hidden_size"] == target["hidden_size"] and drafter["vocab_size"] == target["vocab_size"]
    tokenizer = Tokenizer.from_file(str(kimi.target_dir / "tokenizer.json"))
    dflash = drafter["dflash_config"]
    # production's mask token is [UNK] (163838, offset 254 of the special block): so is the miniature's
    assert dflash["mask_token_id"] == tokenizer.token_to_id("[UNK]") == layout.SPECIAL_BASE + 254
    assert production["dflash_config"]["mask_token_id"] == 163584 + 254
    assert all(0 <= i < target["num_hidden_layers"] for i in dflash["target_layer_ids"])
    # the CPU geometry: one KV head of 96, non-causal sliding-window layers wider than any context
    assert (drafter["num_key_value_heads"], drafter["head_dim"]) == (1, 96)
    assert dflash["use_swa"] is True and dflash["causal"] is False
    assert dflash["swa_window_size"] > target["max_position_embeddings"]
    assert drafter["num_attention_heads"] == drafter["block_size"] - 1 == layout.MAX_NUM_SPECULATIVE_TOKENS
    assert not any(name.startswith(("embed_tokens", "lm_head")) for name in headers(kimi.drafter_dir))


# ---------------------------------------------------------------- the CUDA miniature (bundle kimi-cuda)

# sha256 of the CPU bundle's manifest.json per fabrication version: the CPU miniature must not change while the
# version stays (the CUDA miniature's parameters must leave it byte-identical). A deliberate change bumps
# layout.FABRICATION_VERSION and adds its hash here.
CPU_MANIFEST_SHA256 = {"kimi-4": "058ed45bedc4efe747d8b3da6f5e0e9e1bc08e13025552a2c7c92321091d556d"}


@pytest.fixture(scope="module")
def kimi_cuda(kimi: DemoModels) -> DemoModels:
    return ensure_demo_models(kimi.root, choice="kimi-int4-cuda")


def test_the_cpu_miniature_is_byte_identical_to_its_fabrication_version(kimi: DemoModels) -> None:
    import hashlib

    assert RECIPES[kimi.choice.bundle].fabrication_version == layout.FABRICATION_VERSION
    digest = hashlib.sha256(kimi.manifest_path.read_bytes()).hexdigest()
    assert digest == CPU_MANIFEST_SHA256[layout.FABRICATION_VERSION]


def test_the_cuda_miniature_has_kimis_own_mla_head_sizes(kimi: DemoModels, kimi_cuda: DemoModels) -> None:
    assert kimi_cuda.built is True and kimi_cuda.bundle_dir.name == "kimi-cuda"
    assert (
        RECIPES[kimi_cuda.choice.bundle].fabrication_version
        == layout.CUDA_FABRICATION_VERSION
        != layout.FABRICATION_VERSION
    )
    bf16 = ensure_demo_models(kimi.root, choice="kimi-cuda")
    assert bf16.built is False and bf16.bundle_dir == kimi_cuda.bundle_dir and bf16.target_dir.name == "target"
    text = read_json(kimi_cuda.target_dir / "config.json")["text_config"]
    heads, nope, v = 8, 128, 128  # Kimi K2.6's per-GPU heads at TP 8 and its own head sizes
    assert (text["num_attention_heads"], text["qk_nope_head_dim"], text["qk_rope_head_dim"], text["v_head_dim"]) == (
        heads,
        nope,
        64,
        v,
    )
    assert text["quantization_config"] == quantization_config()
    cpu_text = read_json(kimi.target_dir / "config.json")["text_config"]
    differs = {key for key in text if text[key] != cpu_text.get(key)}
    assert differs == {
        "num_attention_heads",
        "num_key_value_heads",
        "qk_nope_head_dim",
        "v_head_dim",
        "quantization_config",
    }
    found = headers(kimi_cuda.target_dir)
    attention = f"{PREFIX}model.layers.1.self_attn"
    assert found[f"{attention}.q_b_proj.weight"]["shape"] == (heads * (nope + 64), text["q_lora_rank"])
    assert found[f"{attention}.kv_b_proj.weight"]["shape"] == (heads * (nope + v), 512)
    assert found[f"{attention}.o_proj.weight"]["shape"] == (text["hidden_size"], heads * v)
    assert kimi_cuda.manifest()["summary"]["mla_heads"] == heads
    # the drafter is the CPU miniature's, byte for byte
    assert tree(kimi_cuda.drafter_dir) == tree(kimi.drafter_dir)


def test_the_cuda_miniatures_other_weights_are_the_cpu_ones(kimi: DemoModels) -> None:
    """Only the attention sizes differ: every tensor outside self_attn (embeddings, MoE, norms, lm_head, vision)
    is the CPU miniature's, and head 0's copy path is too (its scores scaled for the wider head)."""
    cuda = ensure_demo_models(kimi.root, choice="kimi-cuda")
    cpu_weights, cuda_weights = load_all(kimi.target_dir), load_all(cuda.target_dir)
    assert set(cpu_weights) == set(cuda_weights)
    for name, value in cpu_weights.items():
        if ".self_attn." not in name:
            assert cuda_weights[name].equal(value), name
    kv_b = cuda_weights[f"{PREFIX}model.layers.2.self_attn.kv_b_proj.weight"]
    cpu_kv_b = cpu_weights[f"{PREFIX}model.layers.2.self_attn.kv_b_proj.weight"]
    code = layout.CODE_DIMS
    assert kv_b[:code].equal(cpu_kv_b[:code])  # head 0's key copy
    assert kv_b[128 : 128 + code].equal(cpu_kv_b[64 : 64 + code])  # head 0's value copy
