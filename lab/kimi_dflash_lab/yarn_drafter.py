"""A second drafter for the miniature Kimi, for the RoPE-amplitude proof (issue 28; the drafter-rope study): z-lab's
YaRN rope fields and attention calibrated to the amplitude z-lab's Kimi DFlash drafters were trained with
(0.1 ln 64 + 1 = 1.4159). It checks the product's DRAFTER_ROPE_FIX, so it lives in the lab: `ensure_yarn_models`
caches its bundle (the miniature Kimi target and this drafter, bundle kimi-yarn) beside the demo bundles, and a
config serves it with FABRICATE_DEMO_MODELS=none, MODEL_DIR=<bundle>/target, DRAFT_MODEL_DIR=<bundle>/drafter.

Its config.json carries the rope fields of z-lab/Kimi-K2.5-DFlash (rope_type yarn, factor 64, mscale =
mscale_all_dim = 1.0), so vLLM 0.30+ gives it amplitude 1.0 and vLLM up to 0.29, or the launcher's overlay
(DRAFTER_ROPE_FIX), 1.4159.

Why constructed, not trained: the plain-torch trainer needs a served target for its data and ~7-50 minutes of both
cores for 1,200 steps here (docs/drafter-training.md), and how much a trained drafter's guesses depend on the
amplitude is an accident of its training; this one's dependence is stated, computed (demo_reference.py) and then
measured on vLLM.

Construction (the default demo drafter's, kimi_dflash/demo/drafter.py, except where it says otherwise):
- vLLM scales a YaRN rotary embedding's cos/sin cache by the amplitude A, so every attention logit by A^2. Each
  query head h looks h+1 positions back by a RoPE pattern on the pairs YaRN leaves unscaled, with a sharpness that
  keeps every other block position >= 9 logits below, and pays a fixed price on the lowest-frequency pair (a
  constant over any context): its logit on the intended key is s / A_trained^2 * A^2, s = SINK_LOGIT.
- The context (the target's hidden states through `fc`) is all zeros: every context key and value is zero, so
  each of the N context positions takes softmax weight e^0 against e^(A^2 s) for the intended key. The intended
  key's share is w = 1 / (1 + N e^(-A^2 s)): at A = 1.4159, w > 0.99 up to 4096 tokens; at A = 1.0 it falls below
  0.8 past ~165 context tokens.
- The copied code (norm w * 9.24 in the slot) competes in lm_head with a fixed fallback guess that one more MLP
  neuron writes into every mask slot (its output grows as the code shrinks); the code wins while w > 0.8. So with
  the trained amplitude the drafter is the default demo drafter (85 % of tokens right, deliberate misses
  included), with 1.0 it falls back to a wrong guess once the conversation passes ~165 tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kimi_dflash.demo import geometry
from kimi_dflash.demo.bundle import BundleRecipe, default_root, ensure_bundle
from kimi_dflash.demo.drafter import (
    DrafterDesign,
    attention_weights,
    copied_code_norm,
    drafter_intermediate_size,
    miss_neurons,
)
from kimi_dflash.demo.fabricate import Fabrication
from kimi_dflash.demo.kimi import fabricate as kimi
from kimi_dflash.demo.kimi.layout import FABRICATION_VERSION as KIMI_FABRICATION_VERSION
from kimi_dflash.demo.walk import Walk

# The miniature's version and this drafter's: bump the suffix with any change here.
RECIPE = BundleRecipe(f"{KIMI_FABRICATION_VERSION}+yarn-1", "kimi_dflash_lab.yarn_drafter:fabricate")
BUNDLE = "kimi-yarn"
# z-lab's Kimi DFlash drafters' rope scaling (the target's YaRN, spelled rope_type); the tests keep it equal to the
# shipped K2.5 drafter facts (kimi_dflash/data/checkpoints/kimi-k2.5-dflash.json).
DRAFTER_ROPE_SCALING = {
    "rope_type": "yarn",
    "factor": 64.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}
# The amplitude vLLM up to 0.29 gives z-lab's YaRN fields (yarn_get_mscale(64)), which this drafter is tuned to.
TRAINED_AMPLITUDE = 0.1 * math.log(float(DRAFTER_ROPE_SCALING["factor"])) + 1.0
SINK_LOGIT = 6.5  # intended key's logit at amplitude 1 (x A^2 when served); the context keys' logit is 0
POSITIONAL_SHARPNESS = 7.0  # logits per unit of RoPE pattern mismatch: >= 9 logits to the next block position
FALLBACK_THRESHOLD = 0.8  # share of attention on the intended key below which the fallback guess wins
FALLBACK_GATE = 4.0  # the fallback neuron's gate on the (normed) special marker: silu is ~linear there
FALLBACK_PHASE_SHARE = 0.5  # the fallback guess: the token after phase (cycle length * this)


def attention_share(context_tokens: int, amplitude: float) -> float:
    """Softmax weight of a head's intended key against `context_tokens` zero-logit context keys."""
    return 1.0 / (1.0 + context_tokens * math.exp(-(amplitude**2) * SINK_LOGIT))


def crossover_context(amplitude: float) -> float:
    """Context length past which the fallback guess wins at this amplitude (share < FALLBACK_THRESHOLD)."""
    return (1.0 / FALLBACK_THRESHOLD - 1.0) * math.exp(amplitude**2 * SINK_LOGIT)


def ensure_yarn_models(
    root: Path | None = None, force: bool = False, progress: Callable[[str], None] | None = None
) -> tuple[Path, Path]:
    """(target_dir, drafter_dir) of the kimi-yarn bundle under `root` (default: the demo models' root), fabricated
    first unless a complete, current copy is cached."""
    base = (root if root is not None else default_root()).expanduser().resolve()
    ensure_bundle(base, BUNDLE, RECIPE, force, progress)
    return base / BUNDLE / "target", base / BUNDLE / "drafter"


def yarn_frequencies(head_dim: int, theta: float, rope_scaling: dict[str, object]) -> np.ndarray:
    """RoPE angular frequencies per rotary pair under YaRN scaling, as vLLM's YaRNScalingRotaryEmbedding computes
    them (written from the YaRN paper's definition): pairs whose wavelength is below original_max / beta_fast keep
    their frequency, those above original_max / beta_slow are divided by `factor`, a linear ramp in between."""
    factor = float(rope_scaling["factor"])  # type: ignore[arg-type]
    original = float(rope_scaling["original_max_position_embeddings"])  # type: ignore[arg-type]
    beta_fast = float(rope_scaling.get("beta_fast", 32))  # type: ignore[arg-type]
    beta_slow = float(rope_scaling.get("beta_slow", 1))  # type: ignore[arg-type]

    def correction_dim(rotations: float) -> float:
        return head_dim * np.log(original / (rotations * 2 * np.pi)) / (2 * np.log(theta))

    low = max(int(np.floor(correction_dim(beta_fast))), 0)
    high = min(int(np.ceil(correction_dim(beta_slow))), head_dim - 1)
    if low == high:
        high += 0.001  # type: ignore[assignment]
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    kept = 1.0 - ramp  # 1: the original frequency, 0: interpolated by the factor
    original_frequencies = geometry.rope_frequencies(head_dim, theta)
    return original_frequencies * kept + original_frequencies / factor * (1.0 - kept)


def pair_pattern(offset: int, frequencies: np.ndarray, pairs: np.ndarray, head_dim: int) -> np.ndarray:
    """geometry.rope_query_pattern restricted to `pairs` (zero elsewhere): against pair_pattern(0, ...) it scores
    sum over those pairs of cos((n - m - offset) * frequency)."""
    half = head_dim // 2
    pattern = np.zeros(head_dim, dtype=np.float64)
    pattern[pairs] = np.cos(offset * frequencies[pairs])
    pattern[half + pairs] = np.sin(offset * frequencies[pairs])
    return pattern


def unscaled_pairs(design: DrafterDesign) -> np.ndarray:
    """Rotary pairs whose frequency YaRN keeps (the positional patterns live there)."""
    scaled = yarn_frequencies(design.head_dim, design.rope_theta, DRAFTER_ROPE_SCALING)
    return np.flatnonzero(scaled == geometry.rope_frequencies(design.head_dim, design.rope_theta))


def sink_attention(walk: Walk, design: DrafterDesign, prefix: str, copying: bool) -> dict[str, np.ndarray]:
    """The default copy heads (values, rotations, o_proj) with queries and keys rebuilt for the sink geometry."""
    weights = attention_weights(walk, design, prefix, copying)
    head_dim, heads = design.head_dim, design.heads
    frequencies = yarn_frequencies(head_dim, design.rope_theta, DRAFTER_ROPE_SCALING)
    pairs = unscaled_pairs(design)
    constant_pair = head_dim // 2 - 1  # the lowest frequency: < 2e-3 rad over 4096 positions
    # logit(intended) = A^2 * lam * (|pairs| - price), every context key 0, so lam * (|pairs| - price) = SINK_LOGIT.
    price = len(pairs) - SINK_LOGIT / POSITIONAL_SHARPNESS
    key = pair_pattern(0, frequencies, pairs, head_dim)
    key[constant_pair] = 1.0
    q_proj = np.zeros((heads * head_dim, design.hidden_size))
    for head in range(heads):
        query = pair_pattern(-(head + 1), frequencies, pairs, head_dim)
        query[constant_pair] = -price
        rows = slice(head * head_dim, (head + 1) * head_dim)
        q_proj[rows, design.content_dim] = query
        q_proj[rows, design.special_dim] = query
    k_proj = np.zeros((head_dim, design.hidden_size))
    k_proj[:, design.content_dim] = key
    k_proj[:, design.special_dim] = key
    # After q_norm / k_norm (uniform weight g) a head vector is g * raw / rms(raw); scores are scaled by
    # head_dim**-0.5: lam = g_q * g_k / (rms_q * rms_k * sqrt(head_dim)). Both weights equal.
    rms_query = math.sqrt((len(pairs) + price**2) / head_dim)
    rms_key = math.sqrt((len(pairs) + 1.0) / head_dim)
    norm_weight = math.sqrt(POSITIONAL_SHARPNESS * rms_query * rms_key * math.sqrt(head_dim))
    weights[f"{prefix}.self_attn.q_proj.weight"] = q_proj
    weights[f"{prefix}.self_attn.k_proj.weight"] = k_proj
    weights[f"{prefix}.self_attn.q_norm.weight"] = np.full(head_dim, norm_weight)
    weights[f"{prefix}.self_attn.k_norm.weight"] = np.full(head_dim, norm_weight)
    return weights


def fallback_neuron(walk: Walk, design: DrafterDesign) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gate row, up row, down column) of the neuron that writes the fallback guess into every mask slot.

    Its input is the slot's special marker after post_attention_layernorm, m = sqrt(2) / rms, and the slot's rms
    falls as the copied code (norm w * C) shrinks, so its output silu(a m) * u * m grows as w falls. u is set so
    that output equals the code's norm at w = FALLBACK_THRESHOLD."""
    hidden = design.hidden_size
    code = copied_code_norm(design)

    def marker(share: float) -> float:
        return math.sqrt(2.0) / math.sqrt((design.embedding_norm_sq + (share * code) ** 2) / hidden)

    m = marker(FALLBACK_THRESHOLD)
    silu = FALLBACK_GATE * m / (1.0 + math.exp(-FALLBACK_GATE * m))
    up_weight = FALLBACK_THRESHOLD * code / (silu * m)
    gate, up, down = np.zeros(hidden), np.zeros(hidden), np.zeros(hidden)
    gate[design.special_dim] = FALLBACK_GATE
    up[design.special_dim] = up_weight
    phase = int(walk.length * FALLBACK_PHASE_SHARE)
    down[design.code_out] = geometry.phase_codes(np.array([phase]), walk.frequencies, walk.length)[0]
    return gate, up, down


def intermediate_size(walk: Walk) -> int:
    return max(drafter_intermediate_size(walk), math.ceil((len(walk.missed_phases) + 1) / 64) * 64)


def yarn_drafter_weights(walk: Walk, design: DrafterDesign = kimi.KIMI_DRAFTER) -> dict[str, np.ndarray]:
    hidden, inter = design.hidden_size, intermediate_size(walk)
    weights: dict[str, np.ndarray] = {
        "fc.weight": np.zeros((hidden, design.num_target_features * hidden)),  # the context is a pure sink
        "hidden_norm.weight": np.ones(hidden),
        "norm.weight": np.ones(hidden),
    }
    for index in range(design.layers):
        prefix = f"layers.{index}"
        weights[f"{prefix}.input_layernorm.weight"] = np.ones(hidden)
        weights[f"{prefix}.post_attention_layernorm.weight"] = np.ones(hidden)
        weights.update(sink_attention(walk, design, prefix, copying=index == 0))
        mlp = {
            "gate_proj.weight": np.zeros((inter, hidden)),
            "up_proj.weight": np.zeros((inter, hidden)),
            "down_proj.weight": np.zeros((hidden, inter)),
        }
        if index == design.layers - 1:
            mlp = miss_neurons(walk, design, inter)
            gate, up, down = fallback_neuron(walk, design)
            row = len(walk.missed_phases)
            mlp["gate_proj.weight"][row], mlp["up_proj.weight"][row], mlp["down_proj.weight"][:, row] = gate, up, down
        weights.update({f"{prefix}.mlp.{name}": value for name, value in mlp.items()})
    return {name: value.astype(np.float32) for name, value in weights.items()}


def yarn_drafter_config(walk: Walk, mask_token_id: int) -> dict[str, object]:
    return {
        **kimi.drafter_config(walk, mask_token_id),
        "intermediate_size": intermediate_size(walk),
        "rope_scaling": dict(DRAFTER_ROPE_SCALING),
        "torch_dtype": "float32",  # the intended logit is a small difference of large terms: bf16 would move it
    }


def fabricate(progress: Callable[[str], None] = lambda message: None) -> Fabrication:
    """The miniature Kimi bundle (bfloat16 target only) with this drafter in `drafter/`."""
    base = kimi.fabricate(progress)
    progress(
        f"drafter tuned to RoPE amplitude {TRAINED_AMPLITUDE:.4f}: the fallback guess wins past "
        f"{crossover_context(1.0):.0f} context tokens at amplitude 1.0, {crossover_context(TRAINED_AMPLITUDE):.0f} "
        "at the trained one"
    )
    summary = {
        "drafter_rope_scaling": dict(DRAFTER_ROPE_SCALING),
        "drafter_trained_amplitude": round(TRAINED_AMPLITUDE, 7),
        "fallback_context_tokens": {
            "amplitude 1.0": round(crossover_context(1.0), 1),
            f"amplitude {TRAINED_AMPLITUDE:.4f}": round(crossover_context(TRAINED_AMPLITUDE), 1),
        },
    }
    config = yarn_drafter_config(base.walk, base.mask_token_id)
    return kimi.with_drafter(base, config, yarn_drafter_weights(base.walk), summary)
