"""Every file of a miniature Kimi bundle in memory (`fabricate`: the CPU one, `fabricate_cuda`: the CUDA one)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kimi_dflash.demo import drafter as demo_drafter
from kimi_dflash.demo import geometry
from kimi_dflash.demo.drafter import DrafterDesign, drafter_weights
from kimi_dflash.demo.encoding import json_bytes
from kimi_dflash.demo.fabricate import DRAFTER, TARGET, Fabrication, walk_summary
from kimi_dflash.demo.kimi import layout, target
from kimi_dflash.demo.kimi.checkpoint import Tensor, safetensors_bytes, sharded_files, tensor
from kimi_dflash.demo.kimi.int4 import compressed_expert_tensors, quantization_config
from kimi_dflash.demo.kimi.tokenizer import kimi_tokenizer_files, special_id, train_tokenizer
from kimi_dflash.demo.tokenizer import read_corpus
from kimi_dflash.demo.walk import Walk, build_walk

TARGET_INT4 = "target-int4"
SHARDS = 2  # Kimi K2.6 ships 64; two are enough to exercise the index
DRAFTER_GUARANTEED_CONTEXT = 32768  # positional attention checked to stay sharp this far

# The demo drafter (../drafter.py) on the Kimi target's hidden layout (docs/demo-models.md).
KIMI_DRAFTER = DrafterDesign(
    code_in=layout.E,
    code_out=layout.G,
    hidden_size=layout.HIDDEN_SIZE,
    head_dim=layout.DRAFTER_HEAD_DIM,
    rope_theta=layout.DRAFTER_ROPE_THETA,
    qk_norm_weight=layout.DRAFTER_QK_NORM_WEIGHT,
    embedding_norm_sq=2.0 + layout.EMBEDDING_NOISE_NORM**2,  # markers and code (target.embeddings) + noise
    target_layers=layout.TARGET_LAYERS,
)


def drafter_config(walk: Walk, mask_token_id: int) -> dict[str, object]:
    # Non-causal sliding-window layers: their own KV group (layout.DRAFTER_SLIDING_WINDOW says why).
    config = demo_drafter.drafter_config(
        walk, mask_token_id, KIMI_DRAFTER, use_swa=True, swa_window_size=layout.DRAFTER_SLIDING_WINDOW, causal=False
    )
    del config["use_sliding_window"], config["sliding_window"]
    config["max_position_embeddings"] = layout.MAX_POSITION_EMBEDDINGS
    config["torch_dtype"] = layout.TORCH_DTYPE
    return config


def shard_of(name: str) -> int:
    """Embeddings and the first half of the layers in shard 0, the rest (norm, lm_head, vision tower) in shard 1."""
    parts = name.split(".")
    if "layers" in parts:
        return 0 if int(parts[parts.index("layers") + 1]) < layout.TARGET_LAYERS // 2 else 1
    return 0 if "embed_tokens" in name else 1


def checkpoint_files(weights: dict[str, np.ndarray], int4_experts: bool) -> dict[str, bytes]:
    shards: list[dict[str, Tensor]] = [{} for _ in range(SHARDS)]
    for name, value in weights.items():
        shard = shards[shard_of(name)]
        if int4_experts and ".mlp.experts." in name:  # the routed experts
            for packed_name, packed in compressed_expert_tensors(name, value).items():
                dtype = {np.dtype(np.int32): "I32", np.dtype(np.int64): "I64"}.get(packed.dtype, "BF16")
                shard[packed_name] = tensor(packed, dtype)
        else:
            shard[name] = tensor(value, "F32" if name.endswith("e_score_correction_bias") else "BF16")  # as Kimi
    return sharded_files(shards)


def fabricate(
    progress: Callable[[str], None] = lambda message: None, mla: layout.MlaGeometry = layout.CPU_MLA
) -> Fabrication:
    fix, context = "raise DRAFTER_QK_NORM_WEIGHT in kimi_dflash/demo/kimi/layout.py", DRAFTER_GUARANTEED_CONTEXT
    heads = (KIMI_DRAFTER.head_dim, KIMI_DRAFTER.rope_theta, KIMI_DRAFTER.qk_norm_weight)
    gap = (context + layout.DRAFTER_BLOCK_SIZE, *heads, layout.MIN_DRAFTER_ATTENTION_GAP)
    drafter_gap = geometry.checked_attention_gap("the Kimi drafter's", fix, *gap)
    progress("training the byte-level BPE tokenizer on the shipped corpus (Kimi special tokens)")
    corpus = read_corpus()
    tok, ordinary = train_tokenizer(corpus)
    mask_token_id = special_id(layout.MASK_TOKEN)
    walk = build_walk(tok.encode(corpus).ids, ordinary, special_ids=set(), vocab_size=layout.VOCAB_SIZE)
    progress(walk.describe())

    progress(
        f"building the miniature Kimi K2.6 ({layout.TARGET_LAYERS} layers, MLA {mla.num_heads} x "
        f"({mla.qk_nope_head_dim} + {layout.QK_ROPE_HEAD_DIM}, {mla.v_head_dim}), {layout.N_ROUTED_EXPERTS} "
        f"experts), its INT4 twin and the DFlash drafter ({layout.DRAFTER_LAYERS} layers)"
    )
    weights = target.checkpoint_weights(walk, mla)
    tokenizer_part = kimi_tokenizer_files(tok)
    files: dict[str, bytes] = {}
    for directory, int4 in ((TARGET, False), (TARGET_INT4, True)):
        target_files = {
            **tokenizer_part,
            "config.json": json_bytes(target.wrapper_config(quantization_config() if int4 else None, mla)),
            "generation_config.json": json_bytes(target.generation_config()),
            "preprocessor_config.json": json_bytes(target.preprocessor_config()),
            **checkpoint_files(weights, int4),
        }
        files.update({f"{directory}/{name}": content for name, content in target_files.items()})
    files[f"{DRAFTER}/config.json"] = json_bytes(drafter_config(walk, mask_token_id))
    files[f"{DRAFTER}/model.safetensors"] = safetensors_bytes(
        {name: tensor(value, "BF16") for name, value in drafter_weights(walk, KIMI_DRAFTER).items()}
    )

    summary: dict[str, object] = {
        **walk_summary(walk, mask_token_id),
        "architecture": "KimiK25ForConditionalGeneration",
        "ordinary_tokens": ordinary,
        "drafter_attention_logit_gap": round(drafter_gap, 3),
    }
    if mla != layout.CPU_MLA:  # the CPU bundle's manifest predates the geometry and stays byte-identical
        dims = {"qk_nope": mla.qk_nope_head_dim, "qk_rope": layout.QK_ROPE_HEAD_DIM, "v": mla.v_head_dim}
        summary |= {"mla_heads": mla.num_heads, "mla_head_dims": dims}
    return Fabrication(files=files, walk=walk, mask_token_id=mask_token_id, summary=summary)


def fabricate_cuda(progress: Callable[[str], None] = lambda message: None) -> Fabrication:
    """The CUDA miniature (layout.CUDA_MLA): what vLLM serves on an NVIDIA Hopper GPU."""
    return fabricate(progress, layout.CUDA_MLA)


def with_drafter(
    base: Fabrication, config: dict[str, object], weights: dict[str, np.ndarray], summary: dict[str, object]
) -> Fabrication:
    """`base` with only its bfloat16 target and this drafter (float32); `summary` replaces the DFlash drafter's."""
    files = {name: content for name, content in base.files.items() if name.split("/")[0] == TARGET}
    files[f"{DRAFTER}/config.json"] = json_bytes(config)
    files[f"{DRAFTER}/model.safetensors"] = safetensors_bytes(
        {name: tensor(value, "F32") for name, value in weights.items()}
    )
    kept = {key: value for key, value in base.summary.items() if key != "drafter_attention_logit_gap"}
    return Fabrication(files=files, walk=base.walk, mask_token_id=base.mask_token_id, summary={**kept, **summary})
