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
    previous = (np.arange(walk.length) - 1) % walk.length
    head[list(walk.cycle), code] = layout.LM_HEAD_SCALE * geometry.phase_codes(previous, walk.frequencies, walk.length)
    return head


def layer_weights(walk: Walk, index: int) -> dict[str, np.ndarray]:
    """Head 0 copies the attended token's phase code into the residual: ordinary tokens attend to
    themselves (RoPE offset 0), special tokens have a zero query and so average over the whole prefix."""
    hidden, head_dim = layout.HIDDEN_SIZE, layout.HEAD_DIM
    q_proj = np.zeros((layout.TARGET_HEADS * head_dim, hidden))
    q_proj[:head_dim, layout.CONTENT_DIM] = geometry.rope_query_pattern(0)
    k_proj = np.zeros((layout.NUM_KV_HEADS * head_dim, hidden))
    k_proj[:, [layout.CONTENT_DIM, layout.SPECIAL_DIM]] = geometry.rope_query_pattern(0)[:, None]
    v_proj = np.zeros((layout.NUM_KV_HEADS * head_dim, hidden))
    v_proj[:, F] = np.eye(layout.F_DIMS)
    o_proj = np.zeros((hidden, layout.TARGET_HEADS * head_dim))
    o_proj[F, :head_dim] = layout.TARGET_COPY_GAIN * np.eye(layout.F_DIMS)
    prefix, qk_norm = f"model.layers.{index}", np.full(head_dim, layout.QK_NORM_WEIGHT)
    mlp = {f"{prefix}.mlp.{name}": value for name, value in zero_mlp(layout.TARGET_INTERMEDIATE, hidden).items()}
    norms = {f"{prefix}.{name}.weight": np.ones(hidden) for name in ("input_layernorm", "post_attention_layernorm")}
    return {**norms, **qwen3_attention(prefix, q_proj, k_proj, v_proj, o_proj, qk_norm), **mlp}


def qwen3_attention(prefix: str, *projections: np.ndarray) -> dict[str, np.ndarray]:
    """A Qwen3 layer's attention weights (q, k, v, o, then the one weight of q_norm and k_norm) under HF's names."""
    q, k, v, o, qk_norm = projections
    named = {"q_proj": q, "k_proj": k, "v_proj": v, "o_proj": o, "q_norm": qk_norm, "k_norm": qk_norm}
    return {f"{prefix}.self_attn.{name}.weight": value for name, value in named.items()}


def zero_mlp(intermediate: int, hidden: int) -> dict[str, np.ndarray]:
    """An MLP with no job in the construction: its zero down_proj keeps it out of the residual."""
    wide, narrow = (intermediate, hidden), (hidden, intermediate)
    return {"gate_proj.weight": np.zeros(wide), "up_proj.weight": np.zeros(wide), "down_proj.weight": np.zeros(narrow)}


def target_weights(walk: Walk) -> dict[str, np.ndarray]:
    weights: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": embeddings(walk),
        "model.norm.weight": np.ones(layout.HIDDEN_SIZE),
        "lm_head.weight": lm_head(walk),
    }
    for index in range(layout.TARGET_LAYERS):
        weights.update(layer_weights(walk, index))
    return {name: value.astype(np.float32) for name, value in weights.items()}
