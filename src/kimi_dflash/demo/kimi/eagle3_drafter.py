"""The miniature Kimi's EAGLE3-MLA drafter (Eagle3DeepseekV3ForCausalLM, the kind of lightseekorg/kimi-k2.6-eagle3-mla):
docs/demo-models.md, "A second drafter kind". vLLM feeds the drafter's own pre-norm output back as the next hidden
state, so a zero `hidden_norm` (with `norm_before_residual`) and a zero `fc` keep it and the target's states out."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from kimi_dflash.demo import geometry
from kimi_dflash.demo.drafter import drafter_intermediate_size
from kimi_dflash.demo.fabricate import Fabrication
from kimi_dflash.demo.kimi import layout
from kimi_dflash.demo.kimi.target import LATENT_CODE, mla_weights, text_config
from kimi_dflash.demo.layout import DRAFTER_MISS_JUMP, MISS_GATE_PEAK  # as the DFlash drafter's misses
from kimi_dflash.demo.walk import Walk

ARCHITECTURE = "Eagle3DeepseekV3ForCausalLM"
AUX_LAYER_IDS = (1, 2, 3)  # vLLM's default for a 4-layer target would be (2, 2, 1): a repeat, one state short
CODE = layout.CODE_DIMS
# A latent dim holding the token's marker: with it the normed latent's code has norm sqrt(hidden) = 16 for an
# ordinary token, the scale the MLP sees after post_attention_layernorm (the misses' swap is sized for it).
MARKER = CODE


def drafter_config(walk: Walk) -> dict[str, object]:
    """config.json: the target's DeepSeek-V3 text config, one layer, dense MLP, EAGLE3 fields."""
    base = {key: value for key, value in text_config().items() if key != "quantization_config"}
    return {
        **base,
        "architectures": [ARCHITECTURE],
        # Not deepseek_v3: vLLM 0.32's SpeculativeConfig.hf_config_override turns every deepseek_v3 draft config into
        # an MTP one (architectures -> Eagle3DeepSeekMTPModel: "Model architectures ... are not supported").
        "model_type": "deepseek_v2",
        "num_hidden_layers": 1,
        "intermediate_size": drafter_intermediate_size(walk),
        "first_k_dense_replace": 1,
        "norm_before_residual": True,
        "eagle_aux_hidden_state_layer_ids": list(AUX_LAYER_IDS),
        "target_hidden_size": layout.HIDDEN_SIZE,
        "dtype": "float32",
    }


def attention(prefix: str) -> dict[str, np.ndarray]:
    """Content-matching MLA head, the target's head 0 without its noise (its gains): query and key read the code of
    the (normed) embedding, the value copies it into G. Input columns: the embedding, then the (zero) hidden state."""
    hidden, eye = layout.HIDDEN_SIZE, np.eye(CODE)
    q_a = np.zeros((layout.Q_LORA_RANK, 2 * hidden))
    q_a[LATENT_CODE, layout.E] = eye
    q_b = np.zeros((layout.QK_NOPE_HEAD_DIM + layout.QK_ROPE_HEAD_DIM, layout.Q_LORA_RANK))
    q_b[: layout.QK_NOPE_HEAD_DIM, LATENT_CODE] = layout.COPY_QUERY_GAIN * eye
    kv_a = np.zeros((layout.KV_LORA_RANK + layout.QK_ROPE_HEAD_DIM, 2 * hidden))
    kv_a[LATENT_CODE, layout.E] = eye
    kv_a[MARKER, [layout.CONTENT_DIM, layout.SPECIAL_DIM]] = 1.0
    kv_b = np.zeros((layout.QK_NOPE_HEAD_DIM + layout.V_HEAD_DIM, layout.KV_LORA_RANK))
    kv_b[: layout.QK_NOPE_HEAD_DIM, LATENT_CODE] = layout.COPY_KEY_GAIN * eye
    value = slice(layout.QK_NOPE_HEAD_DIM, layout.QK_NOPE_HEAD_DIM + CODE)
    kv_b[value, LATENT_CODE] = eye
    o = np.zeros((hidden, layout.V_HEAD_DIM))
    o[layout.G, :CODE] = eye
    return mla_weights(prefix, q_a, q_b, kv_a, kv_b, o)


def misses(walk: Walk, prefix: str) -> dict[str, np.ndarray]:
    """One SwiGLU neuron per missed phase h swaps the code for that of h + DRAFTER_MISS_JUMP. The normed residual is
    sqrt(hidden) * code in G alone, with no constant for a threshold: gate and up both read the similarity s to h's
    code, giving silu(a s) * s, ~a on h and under a twentieth of that on any other phase (unit-tested)."""
    hidden, count = layout.HIDDEN_SIZE, len(walk.missed_phases)
    inter = drafter_intermediate_size(walk)
    scale = math.sqrt(hidden)  # the code's norm after post_attention_layernorm (residual = code only)
    threshold = (1.0 + walk.max_sidelobe) / 2.0
    sharpness = MISS_GATE_PEAK / (1.0 - threshold)
    codes = geometry.phase_codes(walk.missed_phases, walk.frequencies, walk.length)
    jumped = geometry.phase_codes((walk.missed_phases + DRAFTER_MISS_JUMP) % walk.length, walk.frequencies, walk.length)
    gate, up, down = np.zeros((inter, hidden)), np.zeros((inter, hidden)), np.zeros((hidden, inter))
    gate[:count, layout.G] = sharpness * codes / scale
    up[:count, layout.G] = codes / scale  # ~1 on the phase's own code
    peak = sharpness * 1.0  # gate pre-activation on the phase itself (before the threshold shift)
    down[layout.G, :count] = ((jumped - codes) * scale / (peak / (1.0 + math.exp(-peak)))).T
    return {f"{prefix}.gate_proj.weight": gate, f"{prefix}.up_proj.weight": up, f"{prefix}.down_proj.weight": down}


def drafter_weights(walk: Walk) -> dict[str, np.ndarray]:
    hidden = layout.HIDDEN_SIZE
    prefix = "midlayer"  # vLLM maps it to layers.0 (deepseek_eagle3.py)
    weights = {
        "fc.weight": np.zeros((hidden, len(AUX_LAYER_IDS) * hidden)),
        f"{prefix}.hidden_norm.weight": np.zeros(hidden),  # the residual starts at zero on every step
        f"{prefix}.input_layernorm.weight": np.ones(hidden),
        f"{prefix}.post_attention_layernorm.weight": np.ones(hidden),
        "norm.weight": np.ones(hidden),
        **attention(f"{prefix}.self_attn"),
        **misses(walk, f"{prefix}.mlp"),
    }
    return {name: value.astype(np.float32) for name, value in weights.items()}


def fabricate(progress: Callable[[str], None] = lambda message: None) -> Fabrication:
    """The miniature Kimi bundle (bfloat16 target only) with this drafter in `drafter/`."""
    from kimi_dflash.demo.kimi import fabricate as kimi

    base = kimi.fabricate(progress)
    progress(f"EAGLE3-MLA drafter ({ARCHITECTURE}, 1 layer, aux hidden states of target layers {AUX_LAYER_IDS})")
    summary = {"drafter_architecture": ARCHITECTURE, "speculative_method": "eagle3"}
    return kimi.with_drafter(base, drafter_config(base.walk), drafter_weights(base.walk), summary)
