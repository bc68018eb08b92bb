"""The tiny Qwen3 target: config.json, generation_config.json and weights (names as in HF checkpoints)."""

from __future__ import annotations

import numpy as np

from kimi_dflash.demo import geometry, layout
from kimi_dflash.demo.walk import NO_PHASE, Walk

F = slice(layout.F_START, layout.F_START + layout.F_DIMS)


def shared_qwen3_config(walk: Walk) -> dict[str, object]:
    """Fields the target and the drafter must agree on (vLLM checks some, the shared embeddings need the rest)."""
    return {
        "model_type": "qwen3",
        "vocab_size": walk.vocab_size,
        "hidden_size": layout.HIDDEN_SIZE,
        "num_key_value_heads": layout.NUM_KV_HEADS,
        "head_dim": layout.HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": layout.MAX_POSITION_EMBEDDINGS,
        "rms_norm_eps": layout.RMS_NORM_EPS,
        "rope_theta": layout.ROPE_THETA,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "torch_dtype": layout.TORCH_DTYPE,
    }


def target_config(walk: Walk) -> dict[str, object]:
    return {
        **shared_qwen3_config(walk),
        "architectures": ["Qwen3ForCausalLM"],
        "intermediate_size": layout.TARGET_INTERMEDIATE,
        "num_hidden_layers": layout.TARGET_LAYERS,
        "num_attention_heads": layout.TARGET_HEADS,
        "bos_token_id": None,
        "eos_token_id": 0,
        "pad_token_id": 0,
        "use_cache": True,
    }


def generation_config() -> dict[str, object]:
    # No sampling defaults here: vLLM would adopt them as the server's defaults.
    return {"eos_token_id": 0, "pad_token_id": 0}


def embeddings(
    walk: Walk,
    hidden_size: int = layout.HIDDEN_SIZE,
    code: slice = F,
    special: object = slice(0, len(layout.SPECIAL_TOKENS)),
) -> np.ndarray:
    """Ordinary tokens: content marker + the phase code in `code`. The `special` ids: the special marker alone,
    scaled so every row has the same norm (RMSNorm then treats them alike). Other ids (padding): zero."""
    table = np.zeros((walk.vocab_size, hidden_size), dtype=np.float64)
    ordinary = np.flatnonzero(walk.phase != NO_PHASE)
    table[ordinary, layout.CONTENT_DIM] = 1.0
    table[ordinary, code] = geometry.phase_codes(walk.phase[ordinary], walk.frequencies, walk.length)
    table[special, layout.SPECIAL_DIM] = np.sqrt(2.0)
    return table


def lm_head(walk: Walk, hidden_size: int = layout.HIDDEN_SIZE, code: slice = F) -> np.ndarray:
    """Row of the token at phase p+1 is the code of phase p: a hidden state holding phase p predicts the next
    cycle token. Tokens off the cycle, special tokens and padding get zero rows (never the greedy choice)."""
    head = np.zeros((walk.vocab_size, hidden_size), dtype=np.float64)
    previous_phases = (np.arange(walk.length) - 1) % walk.length
    head[list(walk.cycle), code] = layout.LM_HEAD_SCALE * geometry.phase_codes(
        previous_phases, walk.frequencies, walk.length
    )
    return head


def layer_weights(walk: Walk, index: int) -> dict[str, np.ndarray]:
    """Head 0 copies the attended token's phase code into the residual: ordinary tokens attend to
    themselves (RoPE offset 0), special tokens have a zero query and so average over the whole prefix."""
    hidden, head_dim = layout.HIDDEN_SIZE, layout.HEAD_DIM
    q_proj = np.zeros((layout.TARGET_HEADS * head_dim, hidden))
    q_proj[:head_dim, layout.CONTENT_DIM] = geometry.rope_query_pattern(0)
    k_proj = np.zeros((layout.NUM_KV_HEADS * head_dim, hidden))
    k_proj[:, layout.CONTENT_DIM] = geometry.rope_query_pattern(0)
    k_proj[:, layout.SPECIAL_DIM] = geometry.rope_query_pattern(0)
    v_proj = np.zeros((layout.NUM_KV_HEADS * head_dim, hidden))
    v_proj[:, F] = np.eye(layout.F_DIMS)
    o_proj = np.zeros((hidden, layout.TARGET_HEADS * head_dim))
    o_proj[F, :head_dim] = layout.TARGET_COPY_GAIN * np.eye(layout.F_DIMS)
    prefix = f"model.layers.{index}"
    return {
        f"{prefix}.input_layernorm.weight": np.ones(hidden),
        f"{prefix}.post_attention_layernorm.weight": np.ones(hidden),
        f"{prefix}.self_attn.q_proj.weight": q_proj,
        f"{prefix}.self_attn.k_proj.weight": k_proj,
        f"{prefix}.self_attn.v_proj.weight": v_proj,
        f"{prefix}.self_attn.o_proj.weight": o_proj,
        f"{prefix}.self_attn.q_norm.weight": np.full(head_dim, layout.QK_NORM_WEIGHT),
        f"{prefix}.self_attn.k_norm.weight": np.full(head_dim, layout.QK_NORM_WEIGHT),
        # The MLP has no job in the construction; zero down_proj keeps it out of the residual.
        f"{prefix}.mlp.gate_proj.weight": np.zeros((layout.TARGET_INTERMEDIATE, hidden)),
        f"{prefix}.mlp.up_proj.weight": np.zeros((layout.TARGET_INTERMEDIATE, hidden)),
        f"{prefix}.mlp.down_proj.weight": np.zeros((hidden, layout.TARGET_INTERMEDIATE)),
    }


def target_weights(walk: Walk) -> dict[str, np.ndarray]:
    weights: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": embeddings(walk),
        "model.norm.weight": np.ones(layout.HIDDEN_SIZE),
        "lm_head.weight": lm_head(walk),
    }
    for index in range(layout.TARGET_LAYERS):
        weights.update(layer_weights(walk, index))
    return {name: value.astype(np.float32) for name, value in weights.items()}
