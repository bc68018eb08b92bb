"""Two drafters for the miniature Kimi with z-lab's Kimi DFlash rope fields (rope_type yarn, factor 64, mscale =
mscale_all_dim = 1.0, no attention_factor), for the drafter RoPE amplitude question (issues 28, 33; the drafter-rope
study): vLLM 0.30+ gives these fields amplitude 1.0 (DRAFTER_ROPE_AMPLITUDE=engine), vLLM up to 0.29 and the launcher's
overlay (legacy) 0.1 ln 64 + 1 = 1.4159. Their config.json files are the same; only their attention differs, so only
acceptance can tell which amplitude each is built for (as with a real drafter, whose q_norm / k_norm absorb it):
- `LEGACY_DRAFTER` (bundle kimi-yarn) is built for 1.4159: at 1.0 its guesses fall back to a wrong one once the
  conversation passes ~165 tokens.
- `UNIT_DRAFTER` (bundle kimi-yarn-unit) is built for 1.0: at 1.4159 a second set of heads outvotes its copy with a
  wrong guess until the context passes ~1,500 tokens.
They check the product's DRAFTER_ROPE_AMPLITUDE, so they live in the lab: `ensure_yarn_models` caches a bundle (the
miniature Kimi target and one drafter) beside the demo bundles, and a config serves it with FABRICATE_DEMO_MODELS=none,
MODEL_DIR=<bundle>/target, DRAFT_MODEL_DIR=<bundle>/drafter.

Why constructed, not trained: the plain-torch trainer needs a served target for its data and ~7-50 minutes of both
cores for 1,200 steps here (docs/drafter-training.md), and how much a trained drafter's guesses depend on the
amplitude is an accident of its training; these ones' dependence is stated, computed (demo_reference.py) and then
measured on vLLM.

Construction (the default demo drafter's, kimi_dflash/demo/drafter.py, except where it says otherwise):
- vLLM scales a YaRN rotary embedding's cos/sin cache by the amplitude A, so every attention logit by A^2. Each
  query head h looks h+1 positions back by a RoPE pattern on the pairs YaRN leaves unscaled, with a sharpness that
  keeps every other block position >= 9 logits below, and pays a fixed price on the lowest-frequency pair (a
  constant over any context): its logit on the intended key is s A^2, s its logit at amplitude 1.
- The context (the target's hidden states through `fc`) is all zeros: every context key and value is zero, so
  each of the N context positions takes softmax weight e^0 against e^(A^2 s) for the intended key. The intended
  key's share is w = 1 / (1 + N e^(-A^2 s)).
- Legacy: s = SINK_LOGIT. The copied code (norm w * 9.24 in the slot) competes in lm_head with a fixed fallback
  guess that one more MLP neuron writes into every mask slot (its output grows as the code shrinks); the code wins
  while w > 0.8: at A = 1.4159 up to > 4096 tokens, at A = 1.0 up to ~165.
- Unit: the copy heads take s = SINK_LOGIT * 1.4159^2 (at A = 1 they are the legacy heads at 1.4159: w > 0.99 to
  4096 tokens), and a second set of heads (DECOY) looks at the same key with s_d = DECOY_LOGIT and writes the
  bonus token's code DECOY_JUMP phases on, DECOY_GAIN times stronger. The decoy wins in lm_head while its share
  w_d > 1 / DECOY_GAIN, that is while N < (DECOY_GAIN - 1) e^(A^2 s_d): ~16 tokens at A = 1.0, ~1,500 at 1.4159.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
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
# The amplitude vLLM up to 0.29 gives z-lab's YaRN fields (yarn_get_mscale(64)), which LEGACY_DRAFTER is tuned to.
LEGACY_AMPLITUDE = 0.1 * math.log(float(DRAFTER_ROPE_SCALING["factor"])) + 1.0
SINK_LOGIT = 6.5  # intended key's logit at amplitude 1 (x A^2 when served); the context keys' logit is 0
DECOY_LOGIT = 4.52  # the unit drafter's second heads: their logit at amplitude 1
DECOY_GAIN = 1.174  # ... how much stronger than the copy they write
DECOY_JUMP = 20  # ... and how many phases past the right guess
POSITIONAL_SHARPNESS = 7.0  # logits per unit of RoPE pattern mismatch: >= 9 logits to the next block position
FALLBACK_THRESHOLD = 0.8  # share of attention on the intended key below which the fallback guess wins
FALLBACK_GATE = 4.0  # the fallback neuron's gate on the (normed) special marker: silu is ~linear there
FALLBACK_PHASE_SHARE = 0.5  # the fallback guess: the token after phase (cycle length * this)


@dataclass(frozen=True)
class SinkHeads:
    """One set of heads (one per mask slot, each looking at the bonus token) in the sink geometry: `unit_logit` on
    the intended key at amplitude 1 (x A^2 when served), writing the bonus token's code `jump` phases further on
    (0: the right guess) with `gain` times the design's output gain."""

    unit_logit: float
    gain: float = 1.0
    jump: int = 0


@dataclass(frozen=True)
class YarnDrafter:
    bundle: str
    built_for: float  # the amplitude its attention is built for
    heads: tuple[SinkHeads, ...]  # layer 0's head sets (every layer has as many heads; only layer 0 writes)
    fallback: bool  # the legacy drafter's fallback neuron
    recipe: BundleRecipe  # bump its version suffix with any change to the drafter


# The miniature's version and each drafter's.
LEGACY_DRAFTER = YarnDrafter(
    "kimi-yarn",
    LEGACY_AMPLITUDE,
    (SinkHeads(SINK_LOGIT),),
    fallback=True,
    recipe=BundleRecipe(f"{KIMI_FABRICATION_VERSION}+yarn-1", "kimi_dflash_lab.yarn_drafter:fabricate"),
)
UNIT_DRAFTER = YarnDrafter(
    "kimi-yarn-unit",
    1.0,
    (SinkHeads(SINK_LOGIT * LEGACY_AMPLITUDE**2), SinkHeads(DECOY_LOGIT, DECOY_GAIN, DECOY_JUMP)),
    fallback=False,
    recipe=BundleRecipe(f"{KIMI_FABRICATION_VERSION}+yarn-unit-1", "kimi_dflash_lab.yarn_drafter:fabricate_unit"),
)
DRAFTERS = {drafter.bundle: drafter for drafter in (LEGACY_DRAFTER, UNIT_DRAFTER)}


def decoy_context(amplitude: float) -> float:
    """Context length below which the unit drafter's decoy outvotes its copy at this amplitude."""
    return (DECOY_GAIN - 1.0) * math.exp(amplitude**2 * DECOY_LOGIT)


def attention_share(context_tokens: int, amplitude: float) -> float:
    """Softmax weight of a head's intended key against `context_tokens` zero-logit context keys."""
    return 1.0 / (1.0 + context_tokens * math.exp(-(amplitude**2) * SINK_LOGIT))


def crossover_context(amplitude: float) -> float:
    """Context length past which the fallback guess wins at this amplitude (share < FALLBACK_THRESHOLD)."""
    return (1.0 / FALLBACK_THRESHOLD - 1.0) * math.exp(amplitude**2 * SINK_LOGIT)


def ensure_yarn_models(
    root: Path | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    drafter: YarnDrafter = LEGACY_DRAFTER,
) -> tuple[Path, Path]:
    """(target_dir, drafter_dir) of `drafter`'s bundle under `root` (default: the demo models' root), fabricated
    first unless a complete, current copy is cached."""
    base = (root if root is not None else default_root()).expanduser().resolve()
    ensure_bundle(base, drafter.bundle, drafter.recipe, force, progress)
    return base / drafter.bundle / "target", base / drafter.bundle / "drafter"


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


def sink_attention(
    walk: Walk,
    design: DrafterDesign,
    prefix: str,
    copying: bool,
    groups: tuple[SinkHeads, ...] = (SinkHeads(SINK_LOGIT),),
) -> dict[str, np.ndarray]:
    """The default copy heads (values, rotations, o_proj) with queries and keys rebuilt for the sink geometry, once
    per group of heads (the first group's rotations are the default copy's)."""
    weights = attention_weights(walk, design, prefix, copying)
    head_dim, heads = design.head_dim, design.heads
    frequencies = yarn_frequencies(head_dim, design.rope_theta, DRAFTER_ROPE_SCALING)
    pairs = unscaled_pairs(design)
    constant_pair = head_dim // 2 - 1  # the lowest frequency: < 2e-3 rad over 4096 positions
    spare = len(pairs)  # a YaRN-scaled pair the key leaves at 0: query mass there changes no score
    # logit(intended) = A^2 * lam * (|pairs| - price), every context key 0, so lam * (|pairs| - price) = unit_logit.
    prices = [len(pairs) - group.unit_logit / POSITIONAL_SHARPNESS for group in groups]
    mass = max(len(pairs) + price**2 for price in prices)  # every query is padded to this squared norm (same lam)
    key = pair_pattern(0, frequencies, pairs, head_dim)
    key[constant_pair] = 1.0
    q_proj = np.zeros((len(groups) * heads * head_dim, design.hidden_size))
    o_proj = np.zeros((design.hidden_size, len(groups) * heads * head_dim))
    o_proj[:, : heads * head_dim] = weights[f"{prefix}.self_attn.o_proj.weight"]
    for index, (group, price) in enumerate(zip(groups, prices, strict=True)):
        for head in range(heads):
            query = pair_pattern(-(head + 1), frequencies, pairs, head_dim)
            query[constant_pair] = -price
            query[spare] = math.sqrt(mass - len(pairs) - price**2)
            first = (index * heads + head) * head_dim
            q_proj[first : first + head_dim, design.content_dim] = query
            q_proj[first : first + head_dim, design.special_dim] = query
            if index and copying:
                rotation = geometry.phase_rotation(head + group.jump, walk.frequencies, walk.length)
                o_proj[design.code_out, first : first + design.code_dims] = group.gain * design.output_gain * rotation
    k_proj = np.zeros((head_dim, design.hidden_size))
    k_proj[:, design.content_dim] = key
    k_proj[:, design.special_dim] = key
    # After q_norm / k_norm (uniform weight g) a head vector is g * raw / rms(raw); scores are scaled by
    # head_dim**-0.5: lam = g_q * g_k / (rms_q * rms_k * sqrt(head_dim)). Both weights equal.
    rms_query = math.sqrt(mass / head_dim)
    rms_key = math.sqrt((len(pairs) + 1.0) / head_dim)
    norm_weight = math.sqrt(POSITIONAL_SHARPNESS * rms_query * rms_key * math.sqrt(head_dim))
    weights[f"{prefix}.self_attn.q_proj.weight"] = q_proj
    weights[f"{prefix}.self_attn.k_proj.weight"] = k_proj
    weights[f"{prefix}.self_attn.o_proj.weight"] = o_proj
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


def yarn_drafter_weights(
    walk: Walk, design: DrafterDesign = kimi.KIMI_DRAFTER, drafter: YarnDrafter = LEGACY_DRAFTER
) -> dict[str, np.ndarray]:
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
        weights.update(sink_attention(walk, design, prefix, index == 0, drafter.heads))
        mlp = {
            "gate_proj.weight": np.zeros((inter, hidden)),
            "up_proj.weight": np.zeros((inter, hidden)),
            "down_proj.weight": np.zeros((hidden, inter)),
        }
        if index == design.layers - 1:
            mlp = miss_neurons(walk, design, inter)
        if index == design.layers - 1 and drafter.fallback:
            gate, up, down = fallback_neuron(walk, design)
            row = len(walk.missed_phases)
            mlp["gate_proj.weight"][row], mlp["up_proj.weight"][row], mlp["down_proj.weight"][:, row] = gate, up, down
        weights.update({f"{prefix}.mlp.{name}": value for name, value in mlp.items()})
    return {name: value.astype(np.float32) for name, value in weights.items()}


def yarn_drafter_config(walk: Walk, mask_token_id: int, drafter: YarnDrafter = LEGACY_DRAFTER) -> dict[str, object]:
    config = kimi.drafter_config(walk, mask_token_id)
    return {
        **config,
        "num_attention_heads": int(config["num_attention_heads"]) * len(drafter.heads),  # type: ignore[call-overload]
        "intermediate_size": intermediate_size(walk),
        "rope_scaling": dict(DRAFTER_ROPE_SCALING),
        "torch_dtype": "float32",  # the intended logit is a small difference of large terms: bf16 would move it
    }


def fabricate(progress: Callable[[str], None] = lambda message: None) -> Fabrication:
    """The miniature Kimi bundle (bfloat16 target only) with the legacy drafter in `drafter/`."""
    base = kimi.fabricate(progress)
    progress(
        f"drafter tuned to RoPE amplitude {LEGACY_AMPLITUDE:.4f}: the fallback guess wins past "
        f"{crossover_context(1.0):.0f} context tokens at amplitude 1.0, {crossover_context(LEGACY_AMPLITUDE):.0f} "
        "at the trained one"
    )
    summary = {  # the bundle's manifest, as first published (its drafter's own built-for amplitude)
        "drafter_rope_scaling": dict(DRAFTER_ROPE_SCALING),
        "drafter_trained_amplitude": round(LEGACY_AMPLITUDE, 7),
        "fallback_context_tokens": {
            "amplitude 1.0": round(crossover_context(1.0), 1),
            f"amplitude {LEGACY_AMPLITUDE:.4f}": round(crossover_context(LEGACY_AMPLITUDE), 1),
        },
    }
    config = yarn_drafter_config(base.walk, base.mask_token_id)
    return kimi.with_drafter(base, config, yarn_drafter_weights(base.walk), summary)


def fabricate_unit(progress: Callable[[str], None] = lambda message: None) -> Fabrication:
    """The miniature Kimi bundle (bfloat16 target only) with the drafter built for amplitude 1.0 in `drafter/`."""
    base = kimi.fabricate(progress)
    wins = {f"amplitude {a:.4f}": round(decoy_context(a), 1) for a in (1.0, LEGACY_AMPLITUDE)}
    progress(f"drafter built for RoPE amplitude 1.0: a wrong guess outvotes its copy below {wins} context tokens")
    summary = {
        "drafter_rope_scaling": dict(DRAFTER_ROPE_SCALING),
        "drafter_built_for_amplitude": 1.0,
        "decoy_context_tokens": wins,
    }
    config = yarn_drafter_config(base.walk, base.mask_token_id, UNIT_DRAFTER)
    return kimi.with_drafter(base, config, yarn_drafter_weights(base.walk, drafter=UNIT_DRAFTER), summary)
