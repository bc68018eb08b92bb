"""The tiny DFlash drafter: config.json and weights in the layout vLLM's DFlashQwen3ForCausalLM loads.

vLLM 0.32 semantics this is built against (vllm/model_executor/models/qwen3_dflash.py, v1/spec_decode/dflash.py):
- context: the target's residual stream after each layer in dflash_config.target_layer_ids is concatenated,
  projected by `fc`, RMS-normed with `hidden_norm`, then each layer's k_proj/v_proj (+ k_norm, RoPE) turn it
  into K/V written to the drafter's KV cache at the context positions. No input_layernorm on this path.
- queries: [bonus token, mask, mask, ...] at the positions right after the context, embedded with the
  target's embed_tokens, through the layers (non-causal attention over context + block), `norm`, and the
  target's lm_head; mask slot k proposes the token at its own position.
No embed_tokens / lm_head here: vLLM shares the target's.
"""

from __future__ import annotations

import math

import numpy as np

from kimi_dflash.demo import geometry, layout
from kimi_dflash.demo.target import shared_qwen3_config
from kimi_dflash.demo.walk import Walk

F = slice(layout.F_START, layout.F_START + layout.F_DIMS)


def drafter_intermediate_size(walk: Walk) -> int:
    return max(64, math.ceil(len(walk.missed_phases) / 64) * 64)


def drafter_config(walk: Walk, mask_token_id: int) -> dict[str, object]:
    return {
        **shared_qwen3_config(walk),
        "architectures": ["DFlashDraftModel"],
        "intermediate_size": drafter_intermediate_size(walk),
        "num_hidden_layers": layout.DRAFTER_LAYERS,
        "num_attention_heads": layout.DRAFTER_HEADS,
        "num_target_layers": layout.TARGET_LAYERS,
        "block_size": layout.DRAFTER_BLOCK_SIZE,
        "dflash_config": {
            "mask_token_id": mask_token_id,
            "target_layer_ids": list(layout.TARGET_LAYER_IDS),
        },
    }


def context_projection() -> np.ndarray:
    """fc: every target feature's markers (both are positive wherever they are set) onto SPECIAL_DIM.

    The context then carries no phase code, so whatever a head attends to in the context contributes
    nothing; it only needs a positive marker for the positional keys."""
    features = len(layout.TARGET_LAYER_IDS)
    fc = np.zeros((layout.HIDDEN_SIZE, features * layout.HIDDEN_SIZE))
    for feature in range(features):
        base = feature * layout.HIDDEN_SIZE
        fc[layout.SPECIAL_DIM, base + layout.CONTENT_DIM] = 1.0
        fc[layout.SPECIAL_DIM, base + layout.SPECIAL_DIM] = 1.0
    return fc


def attention_weights(walk: Walk, prefix: str, copying: bool) -> dict[str, np.ndarray]:
    """Head j-1 looks exactly j positions back (RoPE pattern only, so any token kind) and writes the phase
    code it finds rotated by j-1 steps. For mask slot k that is the bonus token through head k; other heads
    land on mask slots or context, whose values hold no phase code."""
    hidden, head_dim, heads = layout.HIDDEN_SIZE, layout.HEAD_DIM, layout.DRAFTER_HEADS
    q_proj = np.zeros((heads * head_dim, hidden))
    o_proj = np.zeros((hidden, heads * head_dim))
    for head in range(heads):
        rows = slice(head * head_dim, (head + 1) * head_dim)
        pattern = geometry.rope_query_pattern(-(head + 1))
        q_proj[rows, layout.CONTENT_DIM] = pattern
        q_proj[rows, layout.SPECIAL_DIM] = pattern
        if copying:
            o_proj[F, rows] = layout.DRAFTER_OUTPUT_GAIN * geometry.phase_rotation(
                head, walk.frequencies, walk.length
            )
    k_proj = np.zeros((layout.NUM_KV_HEADS * head_dim, hidden))
    k_proj[:, layout.CONTENT_DIM] = geometry.rope_key_pattern()
    k_proj[:, layout.SPECIAL_DIM] = geometry.rope_key_pattern()
    v_proj = np.zeros((layout.NUM_KV_HEADS * head_dim, hidden))
    v_proj[:, F] = np.eye(layout.F_DIMS)
    return {
        f"{prefix}.self_attn.q_proj.weight": q_proj,
        f"{prefix}.self_attn.k_proj.weight": k_proj,
        f"{prefix}.self_attn.v_proj.weight": v_proj,
        f"{prefix}.self_attn.o_proj.weight": o_proj,
        f"{prefix}.self_attn.q_norm.weight": np.full(head_dim, layout.QK_NORM_WEIGHT),
        f"{prefix}.self_attn.k_norm.weight": np.full(head_dim, layout.QK_NORM_WEIGHT),
    }


def mask_slot_norms() -> tuple[float, float]:
    """(scale of the phase code, scale of the special marker) in a mask slot after post_attention_layernorm.

    The slot's residual is the mask embedding (special marker sqrt(2)) plus the copied code: the bonus
    token's code after input_layernorm (norm sqrt(2) -> sqrt(HIDDEN/2)) times DRAFTER_OUTPUT_GAIN."""
    code = layout.DRAFTER_OUTPUT_GAIN * math.sqrt(layout.HIDDEN_SIZE / 2.0)
    marker = math.sqrt(2.0)
    rms = math.sqrt((code**2 + marker**2) / layout.HIDDEN_SIZE)
    return code / rms, marker / rms


def miss_neurons(walk: Walk, intermediate: int) -> dict[str, np.ndarray]:
    """One SwiGLU neuron per missed phase h: it fires only when the slot holds exactly h (the code's
    similarity to any other phase is at most max_sidelobe) and swaps the code for that of h + JUMP."""
    hidden = layout.HIDDEN_SIZE
    code_scale, marker_scale = mask_slot_norms()
    threshold = (1.0 + walk.max_sidelobe) / 2.0
    sharpness = layout.MISS_GATE_PEAK / (1.0 - threshold)
    peak = layout.MISS_GATE_PEAK / (1.0 + math.exp(-layout.MISS_GATE_PEAK))  # silu at the firing point
    copied = layout.DRAFTER_OUTPUT_GAIN * math.sqrt(layout.HIDDEN_SIZE / 2.0)  # code scale in the residual
    missed = walk.missed_phases
    gate = np.zeros((intermediate, hidden))
    up = np.zeros((intermediate, hidden))
    down = np.zeros((hidden, intermediate))
    codes = geometry.phase_codes(missed, walk.frequencies, walk.length)
    jumped = geometry.phase_codes((missed + layout.DRAFTER_MISS_JUMP) % walk.length, walk.frequencies, walk.length)
    count = len(missed)
    gate[:count, F] = sharpness * codes / code_scale
    gate[:count, layout.SPECIAL_DIM] = -sharpness * threshold / marker_scale
    up[:count, layout.SPECIAL_DIM] = 1.0 / marker_scale
    down[F, :count] = (copied * (jumped - codes) / peak).T
    return {"gate_proj.weight": gate, "up_proj.weight": up, "down_proj.weight": down}


def drafter_weights(walk: Walk) -> dict[str, np.ndarray]:
    hidden = layout.HIDDEN_SIZE
    intermediate = drafter_intermediate_size(walk)
    weights: dict[str, np.ndarray] = {
        "fc.weight": context_projection(),
        "hidden_norm.weight": np.ones(hidden),
        "norm.weight": np.ones(hidden),
    }
    for index in range(layout.DRAFTER_LAYERS):
        prefix = f"layers.{index}"
        weights[f"{prefix}.input_layernorm.weight"] = np.ones(hidden)
        weights[f"{prefix}.post_attention_layernorm.weight"] = np.ones(hidden)
        weights.update(attention_weights(walk, prefix, copying=index == 0))
        if index == layout.DRAFTER_LAYERS - 1:
            mlp = miss_neurons(walk, intermediate)
        else:
            mlp = {
                "gate_proj.weight": np.zeros((intermediate, hidden)),
                "up_proj.weight": np.zeros((intermediate, hidden)),
                "down_proj.weight": np.zeros((hidden, intermediate)),
            }
        weights.update({f"{prefix}.mlp.{name}": value for name, value in mlp.items()})
    return {name: value.astype(np.float32) for name, value in weights.items()}
