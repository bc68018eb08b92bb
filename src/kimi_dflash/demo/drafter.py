"""The DFlash drafter of both demos, as vLLM 0.32's DFlashQwen3ForCausalLM loads it (the construction:
docs/demo-models.md, "How the drafter agrees with the target")."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kimi_dflash.demo import geometry, layout
from kimi_dflash.demo.target import F, qwen3_attention, shared_qwen3_config, zero_mlp
from kimi_dflash.demo.walk import Walk


@dataclass(frozen=True)
class DrafterDesign:
    """The drafter's shape and the target's hidden-state conventions it relies on (defaults: the Qwen3 demo's)."""

    code_in: slice  # where an embedding row holds its phase code
    code_out: slice  # where the target's lm_head reads the phase code
    hidden_size: int = layout.HIDDEN_SIZE  # the target's (embeddings and lm_head are shared)
    head_dim: int = layout.HEAD_DIM
    heads: int = layout.DRAFTER_HEADS  # head j serves mask slot j + 1, so heads = block size - 1
    layers: int = layout.DRAFTER_LAYERS  # layer 0 copies and rotates, the last one holds the deliberate misses
    rope_theta: float = layout.ROPE_THETA
    qk_norm_weight: float = layout.QK_NORM_WEIGHT
    content_dim: int = layout.CONTENT_DIM  # marker of ordinary tokens in the target's embeddings
    special_dim: int = layout.SPECIAL_DIM  # marker of special tokens (the mask token is one)
    embedding_norm_sq: float = 2.0  # squared norm of every embedding row (ordinary and special alike)
    num_target_features: int = len(layout.TARGET_LAYER_IDS)  # len(dflash_config.target_layer_ids)
    target_layers: int = layout.TARGET_LAYERS
    output_gain: float = layout.DRAFTER_OUTPUT_GAIN
    miss_jump: int = layout.DRAFTER_MISS_JUMP
    miss_gate_peak: float = layout.MISS_GATE_PEAK

    @property
    def code_dims(self) -> int:
        return self.code_in.stop - self.code_in.start


QWEN3_DRAFTER = DrafterDesign(code_in=F, code_out=F)


def drafter_intermediate_size(walk: Walk) -> int:
    return max(64, math.ceil(len(walk.missed_phases) / 64) * 64)


def drafter_config(
    walk: Walk, mask_token_id: int, design: DrafterDesign = QWEN3_DRAFTER, **dflash: object
) -> dict[str, object]:
    """A DFlash drafter's config.json; `dflash`: more dflash_config fields (the Kimi demo's, kimi/fabricate.py)."""
    return {
        **shared_qwen3_config(walk),
        "architectures": ["DFlashDraftModel"],
        "hidden_size": design.hidden_size,
        "head_dim": design.head_dim,
        "rope_theta": design.rope_theta,
        "intermediate_size": drafter_intermediate_size(walk),
        "num_hidden_layers": design.layers,
        "num_attention_heads": design.heads,
        "num_target_layers": design.target_layers,
        "block_size": layout.DRAFTER_BLOCK_SIZE,
        "dflash_config": {"mask_token_id": mask_token_id, "target_layer_ids": list(layout.TARGET_LAYER_IDS), **dflash},
    }


def context_projection(design: DrafterDesign) -> np.ndarray:
    """fc: every target feature's (positive) markers onto the special marker: the context carries no phase code, so
    a head attending to it contributes nothing, and a positive marker for the positional keys."""
    hidden = design.hidden_size
    fc = np.zeros((hidden, design.num_target_features * hidden))
    for feature in range(design.num_target_features):
        base = feature * hidden
        fc[design.special_dim, base + design.content_dim] = 1.0
        fc[design.special_dim, base + design.special_dim] = 1.0
    return fc


def attention_weights(walk: Walk, design: DrafterDesign, prefix: str, copying: bool) -> dict[str, np.ndarray]:
    """Head j-1 looks exactly j positions back (RoPE pattern only, so any token kind) and writes the phase
    code it finds rotated by j-1 steps. For mask slot k that is the bonus token through head k; other heads
    land on mask slots or context, whose values hold no phase code."""
    hidden, head_dim, heads = design.hidden_size, design.head_dim, design.heads
    code = slice(0, design.code_dims)  # where a head's value carries the code
    q_proj = np.zeros((heads * head_dim, hidden))
    o_proj = np.zeros((hidden, heads * head_dim))
    for head in range(heads):
        rows = slice(head * head_dim, (head + 1) * head_dim)
        pattern = geometry.rope_query_pattern(-(head + 1), head_dim, design.rope_theta)
        q_proj[rows, design.content_dim] = pattern
        q_proj[rows, design.special_dim] = pattern
        if copying:
            value_rows = slice(head * head_dim, head * head_dim + design.code_dims)
            rotation = geometry.phase_rotation(head, walk.frequencies, walk.length)
            o_proj[design.code_out, value_rows] = design.output_gain * rotation
    k_proj = np.zeros((head_dim, hidden))
    key = geometry.rope_query_pattern(0, head_dim, design.rope_theta)
    k_proj[:, [design.content_dim, design.special_dim]] = key[:, None]
    v_proj = np.zeros((head_dim, hidden))
    v_proj[code, design.code_in] = np.eye(design.code_dims)
    return qwen3_attention(prefix, q_proj, k_proj, v_proj, o_proj, np.full(head_dim, design.qk_norm_weight))


def copied_code_norm(design: DrafterDesign) -> float:
    """Norm of the phase code layer 0 writes into a mask slot: the bonus token's unit code after
    input_layernorm (every embedding row has the same norm) times the output gain."""
    return design.output_gain * math.sqrt(design.hidden_size / design.embedding_norm_sq)


def mask_slot_norms(design: DrafterDesign) -> tuple[float, float]:
    """(scale of the phase code, scale of the special marker) in a mask slot after post_attention_layernorm: its
    residual is the mask embedding (special marker sqrt(2), squared norm embedding_norm_sq) plus the copied code."""
    code = copied_code_norm(design)
    marker = math.sqrt(2.0)
    rms = math.sqrt((code**2 + design.embedding_norm_sq) / design.hidden_size)
    return code / rms, marker / rms


def miss_neurons(walk: Walk, design: DrafterDesign, intermediate: int) -> dict[str, np.ndarray]:
    """One SwiGLU neuron per missed phase h: it fires only when the slot holds exactly h (the code's
    similarity to any other phase is at most max_sidelobe) and swaps the code for that of h + JUMP."""
    hidden = design.hidden_size
    code_scale, marker_scale = mask_slot_norms(design)
    threshold = (1.0 + walk.max_sidelobe) / 2.0
    sharpness = design.miss_gate_peak / (1.0 - threshold)
    peak = design.miss_gate_peak / (1.0 + math.exp(-design.miss_gate_peak))  # silu at the firing point
    copied = copied_code_norm(design)  # code scale in the residual
    missed = walk.missed_phases
    gate = np.zeros((intermediate, hidden))
    up = np.zeros((intermediate, hidden))
    down = np.zeros((hidden, intermediate))
    codes = geometry.phase_codes(missed, walk.frequencies, walk.length)
    jumped = geometry.phase_codes((missed + design.miss_jump) % walk.length, walk.frequencies, walk.length)
    count = len(missed)
    gate[:count, design.code_out] = sharpness * codes / code_scale
    gate[:count, design.special_dim] = -sharpness * threshold / marker_scale
    up[:count, design.special_dim] = 1.0 / marker_scale
    down[design.code_out, :count] = (copied * (jumped - codes) / peak).T
    return {"gate_proj.weight": gate, "up_proj.weight": up, "down_proj.weight": down}


def drafter_weights(walk: Walk, design: DrafterDesign = QWEN3_DRAFTER) -> dict[str, np.ndarray]:
    hidden = design.hidden_size
    intermediate = drafter_intermediate_size(walk)
    weights: dict[str, np.ndarray] = {
        "fc.weight": context_projection(design),
        "hidden_norm.weight": np.ones(hidden),
        "norm.weight": np.ones(hidden),
    }
    for index in range(design.layers):
        prefix = f"layers.{index}"
        weights[f"{prefix}.input_layernorm.weight"] = np.ones(hidden)
        weights[f"{prefix}.post_attention_layernorm.weight"] = np.ones(hidden)
        weights.update(attention_weights(walk, design, prefix, copying=index == 0))
        last = index == design.layers - 1
        mlp = miss_neurons(walk, design, intermediate) if last else zero_mlp(intermediate, hidden)
        weights.update({f"{prefix}.mlp.{name}": value for name, value in mlp.items()})
    return {name: value.astype(np.float32) for name, value in weights.items()}
