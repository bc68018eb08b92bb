"""The miniature Kimi K2.6 target's configs and weights (float64 here; docs/demo-models.md, "How it is built")."""

from __future__ import annotations

import zlib

import numpy as np

from kimi_dflash.demo import target as qwen3_target
from kimi_dflash.demo.encoding import kimi_config_fragment
from kimi_dflash.demo.kimi import layout
from kimi_dflash.demo.kimi.int4 import snap_to_int4_grid
from kimi_dflash.demo.kimi.tokenizer import special_id
from kimi_dflash.demo.walk import NO_PHASE, Walk

PREFIX = "language_model."  # Kimi K2.6 keeps its text model under this prefix (vision_tower., mm_projector. beside)
NON_CODE = np.r_[layout.CONTENT_DIM, layout.SPECIAL_DIM, np.arange(layout.N.start, layout.N.stop)]
N_DIMS = layout.N.stop - layout.N.start
LATENT_CODE = slice(0, layout.CODE_DIMS)  # where q and kv latents carry the code
CPU_MLA = layout.CPU_MLA


def rng_for(name: str) -> np.random.Generator:
    """One seeded stream per tensor, so adding or reordering tensors changes nothing else."""
    return np.random.default_rng([layout.NOISE_SEED, zlib.crc32(name.encode("utf-8"))])


def noise(name: str, rows: int, cols: int, std: float) -> np.ndarray:
    return rng_for(name).normal(0.0, std, size=(rows, cols))


def text_config(mla: layout.MlaGeometry = CPU_MLA) -> dict[str, object]:
    """Kimi K2.6's text_config with the sizes shrunk (see layout.py for the real values)."""
    return {
        **kimi_config_fragment("text_config"),
        "vocab_size": layout.VOCAB_SIZE,
        "hidden_size": layout.HIDDEN_SIZE,
        "intermediate_size": layout.INTERMEDIATE_SIZE,
        "moe_intermediate_size": layout.MOE_INTERMEDIATE_SIZE,
        "num_hidden_layers": layout.TARGET_LAYERS,
        "num_attention_heads": mla.num_heads,
        "num_key_value_heads": mla.num_heads,
        "q_lora_rank": layout.Q_LORA_RANK,
        "kv_lora_rank": layout.KV_LORA_RANK,
        "qk_nope_head_dim": mla.qk_nope_head_dim,
        "qk_rope_head_dim": layout.QK_ROPE_HEAD_DIM,
        "v_head_dim": mla.v_head_dim,
        "n_routed_experts": layout.N_ROUTED_EXPERTS,
        "num_experts_per_tok": layout.NUM_EXPERTS_PER_TOK,
        "first_k_dense_replace": layout.FIRST_K_DENSE_REPLACE,
        "max_position_embeddings": layout.MAX_POSITION_EMBEDDINGS,
        "bos_token_id": special_id(layout.BOS_TOKEN),
        "eos_token_id": special_id(layout.EOS_TOKEN),
        "pad_token_id": special_id(layout.PAD_TOKEN),
        "dtype": layout.TORCH_DTYPE,
    }


VISION = {"hidden": 64, "heads": 2, "layers": 1, "intermediate": 128, "patch": 14, "pos_emb": 8, "merge": 2}


def vision_config() -> dict[str, object]:
    """A tiny MoonViT config. Kimi K2.6's config.json spells it the remote code's way (vt_*, init_pos_emb_*);
    transformers >= 5 (which vLLM 0.32 uses for this model) reads the plain names, so both are written."""
    v = VISION
    sizes = {
        "num_attention_heads": v["heads"],
        "num_hidden_layers": v["layers"],
        "hidden_size": v["hidden"],
        "intermediate_size": v["intermediate"],
    }
    positions = {"pos_emb_height": v["pos_emb"], "pos_emb_width": v["pos_emb"]}
    return {
        **kimi_config_fragment("vision_config"),
        **sizes,
        **{f"vt_{name}": value for name, value in sizes.items()},
        **positions,
        **{f"init_{name}": value for name, value in positions.items()},
        "patch_size": v["patch"],
        "merge_kernel_size": [v["merge"], v["merge"]],
        "mm_hidden_size": v["hidden"],
        "text_hidden_size": layout.HIDDEN_SIZE,
    }


def vision_weights() -> dict[str, np.ndarray]:
    """The MoonViT tower and patch-merger projector, seeded random, under Kimi K2.6's checkpoint names (vLLM maps
    mm_projector.proj.0/2 to linear_1/2). Text serving never reads them; they make the checkpoint complete."""
    v = VISION
    hidden, inter, merged = v["hidden"], v["intermediate"], v["hidden"] * v["merge"] ** 2
    shapes: dict[str, tuple[int, ...]] = {
        "vision_tower.patch_embed.proj.weight": (hidden, 3, v["patch"], v["patch"]),
        "vision_tower.patch_embed.pos_emb.weight": (v["pos_emb"], v["pos_emb"], hidden),
        "mm_projector.proj.0.weight": (merged, merged),
        "mm_projector.proj.2.weight": (layout.HIDDEN_SIZE, merged),
    }
    for block in range(v["layers"]):
        b = f"vision_tower.encoder.blocks.{block}"
        shapes[f"{b}.wqkv.weight"] = (3 * hidden, hidden)
        shapes[f"{b}.wo.weight"] = (hidden, hidden)
        shapes[f"{b}.mlp.fc0.weight"] = (inter, hidden)
        shapes[f"{b}.mlp.fc1.weight"] = (hidden, inter)
    weights = {name: rng_for(name).normal(0.0, 0.02, size=shape) for name, shape in shapes.items()}
    # Every projection has a bias of its output size; the position embedding has none.
    weights.update(
        {name[: -len("weight")] + "bias": np.zeros(shape[0]) for name, shape in shapes.items() if "pos_emb" not in name}
    )
    norms = {"vision_tower.encoder.final_layernorm": hidden, "mm_projector.pre_norm": hidden}
    for block in range(v["layers"]):
        norms.update({f"vision_tower.encoder.blocks.{block}.norm{i}": hidden for i in (0, 1)})
    for name, size in norms.items():
        weights[f"{name}.weight"], weights[f"{name}.bias"] = np.ones(size), np.zeros(size)
    return weights


def wrapper_config(
    quantization_config: dict[str, object] | None = None, mla: layout.MlaGeometry = CPU_MLA
) -> dict[str, object]:
    """config.json: Kimi K2.6's KimiK25ForConditionalGeneration layout. Media token ids sit inside the vocab."""
    text = text_config(mla)
    if quantization_config is not None:
        text["quantization_config"] = quantization_config
    media_pad = special_id(layout.MEDIA_PAD)
    return {
        **kimi_config_fragment("config"),
        "text_config": text,
        "vision_config": vision_config(),
        "media_placeholder_token_id": media_pad,
        "video_placeholder": layout.VIDEO_PLACEHOLDER,
        # transformers >= 5 (Kimi_K25Config) reads these names; Kimi's hub config predates them.
        "image_token_id": media_pad,
        "video_token_id": special_id(layout.VIDEO_PLACEHOLDER),
        "vision_start_token_id": special_id(layout.MEDIA_BEGIN),
        "vision_end_token_id": special_id(layout.MEDIA_END),
        "bos_token_id": special_id(layout.BOS_TOKEN),
        "eos_token_id": special_id(layout.EOS_TOKEN),
        "pad_token_id": special_id(layout.PAD_TOKEN),
        "dtype": layout.TORCH_DTYPE,
    }


def generation_config() -> dict[str, object]:
    # Kimi stops at the end of the assistant message. No sampling defaults: vLLM would adopt them.
    return {"eos_token_id": special_id(layout.END_OF_MESSAGE), "pad_token_id": special_id(layout.PAD_TOKEN)}


def preprocessor_config() -> dict[str, object]:
    """Kimi K2.6's media preprocessing settings; vLLM's Kimi processor reads media_proc_cfg even for text."""
    return kimi_config_fragment("preprocessor_config")


def embeddings(walk: Walk) -> np.ndarray:
    """The Qwen3 demo's rows (../target.py: content marker + phase code in E, the special marker on every id off
    the walk), plus a seeded noise vector in N, all rows the same norm (so RMSNorm treats every token alike)."""
    table = qwen3_target.embeddings(walk, layout.HIDDEN_SIZE, layout.E, np.flatnonzero(walk.phase == NO_PHASE))
    directions = noise("embed_tokens", walk.vocab_size, N_DIMS, 1.0)
    table[:, layout.N] = layout.EMBEDDING_NOISE_NORM * directions / np.linalg.norm(directions, axis=1, keepdims=True)
    return table


def lm_head(walk: Walk) -> np.ndarray:
    """The Qwen3 demo's (the row of the token at phase p+1 is the code of phase p) in G, plus a little N."""
    head = qwen3_target.lm_head(walk, layout.HIDDEN_SIZE, layout.G)
    head[:, layout.N] = noise("lm_head", walk.vocab_size, N_DIMS, layout.NOISE_OUTPUT_STD)
    return head


def copy_query_gain(mla: layout.MlaGeometry) -> float:
    """COPY_QUERY_GAIN for the CPU sizes; vLLM scales MLA scores by qk_head_dim**-0.5, so wider heads get a query
    scaled up to give head 0 the same scores (exactly COPY_QUERY_GAIN for the CPU miniature: the factor is 1.0)."""
    return layout.COPY_QUERY_GAIN * float(np.sqrt(mla.qk_head_dim / CPU_MLA.qk_head_dim))


def attention_weights(index: int, mla: layout.MlaGeometry = CPU_MLA) -> dict[str, np.ndarray]:
    """MLA whose head 0 copies the code matching the current token's from E into F by content (nope part); its rope
    part, the latent's other dims and every other head (the CUDA miniature's) are seeded noise writing only into N."""
    p = f"layers.{index}.self_attn"
    hidden, code, eye = layout.HIDDEN_SIZE, layout.CODE_DIMS, np.eye(layout.CODE_DIMS)
    nope, v_dim, qk = mla.qk_nope_head_dim, mla.v_head_dim, mla.qk_head_dim
    q_rank, rope, std = layout.Q_LORA_RANK, layout.QK_ROPE_HEAD_DIM, layout.NOISE_STD
    kv_width, head_std = layout.KV_LORA_RANK + rope, layout.NOISE_HEAD_OUTPUT_STD

    q_a = np.zeros((q_rank, hidden))
    q_a[LATENT_CODE, layout.E] = layout.Q_LATENT_CODE_GAIN * eye
    q_a[code:, NON_CODE] = noise(f"{p}.q_a_proj", q_rank - code, len(NON_CODE), std)

    q_b = np.zeros((mla.num_heads * qk, q_rank))
    q_b[:code, LATENT_CODE] = copy_query_gain(mla) * eye
    q_b[nope:qk, code:] = noise(f"{p}.q_b_proj", rope, q_rank - code, layout.ROPE_NOISE_STD)

    kv_a = np.zeros((kv_width, hidden))
    kv_a[LATENT_CODE, layout.E] = layout.KV_LATENT_CODE_GAIN * eye
    kv_a[code:, NON_CODE] = noise(f"{p}.kv_a_proj_with_mqa", kv_width - code, len(NON_CODE), std)

    kv_b = np.zeros((mla.num_heads * (nope + v_dim), layout.KV_LORA_RANK))
    kv_b[:code, LATENT_CODE] = layout.COPY_KEY_GAIN * eye
    kv_b[nope : nope + code, LATENT_CODE] = layout.COPY_VALUE_GAIN * eye

    o = np.zeros((hidden, mla.num_heads * v_dim))
    o[layout.F, :code] = layout.COPY_OUTPUT_GAIN * eye
    o[layout.N, :v_dim] = noise(f"{p}.o_proj", N_DIMS, v_dim, layout.NOISE_OUTPUT_STD)
    for head in range(1, mla.num_heads):
        h, kv_rows = f"{p}.head{head}", head * (nope + v_dim)
        q_b[head * qk : (head + 1) * qk] = noise(f"{h}.q_b_proj", qk, q_rank, std)
        kv_b[kv_rows : kv_rows + nope + v_dim] = noise(f"{h}.kv_b_proj", nope + v_dim, layout.KV_LORA_RANK, std)
        o[layout.N, head * v_dim : (head + 1) * v_dim] = noise(f"{h}.o_proj", N_DIMS, v_dim, head_std)
    return mla_weights(p, q_a, q_b, kv_a, kv_b, o)


def mla_weights(prefix: str, *projections: np.ndarray) -> dict[str, np.ndarray]:
    """MLA's projections (q_a, q_b, kv_a, kv_b, o) and its two latent norms (ones) under DeepSeek-V3's names."""
    names = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
    norms = {"q_a_layernorm": np.ones(layout.Q_LORA_RANK), "kv_a_layernorm": np.ones(layout.KV_LORA_RANK)}
    return {f"{prefix}.{name}.weight": value for name, value in {**dict(zip(names, projections)), **norms}.items()}


def noise_mlp(name: str, intermediate: int) -> dict[str, np.ndarray]:
    """A SwiGLU whose output lands only in N."""
    hidden = layout.HIDDEN_SIZE
    down = np.zeros((hidden, intermediate))
    down[layout.N] = noise(f"{name}.down_proj", N_DIMS, intermediate, layout.NOISE_OUTPUT_STD)
    return {
        f"{name}.gate_proj.weight": noise(f"{name}.gate_proj", intermediate, hidden, layout.NOISE_STD),
        f"{name}.up_proj.weight": noise(f"{name}.up_proj", intermediate, hidden, layout.NOISE_STD),
        f"{name}.down_proj.weight": down,
    }


def copy_expert(name: str, gain: float) -> dict[str, np.ndarray]:
    """First half of the neurons copies F into G (gate on through the markers), the other half is noise into N."""
    code, inter = layout.CODE_DIMS, layout.MOE_INTERMEDIATE_SIZE
    weights = noise_mlp(name, inter)
    gate, up, down = (weights[f"{name}.{part}_proj.weight"] for part in ("gate", "up", "down"))
    gate[:code] = 0.0
    gate[:code, [layout.CONTENT_DIM, layout.SPECIAL_DIM]] = layout.EXPERT_GATE_ON
    up[:code] = 0.0
    up[:code, layout.F] = layout.EXPERT_COPY_UP * np.eye(code)
    down[:, :code] = 0.0
    down[layout.G, :code] = gain * np.eye(code)
    return weights


def moe_weights(index: int) -> dict[str, np.ndarray]:
    p = f"layers.{index}.mlp"
    router = np.zeros((layout.N_ROUTED_EXPERTS, layout.HIDDEN_SIZE))
    router[:, layout.F] = noise(f"{p}.gate", layout.N_ROUTED_EXPERTS, layout.CODE_DIMS, layout.ROUTER_CODE_STD)
    router[:, layout.N] = noise(f"{p}.gate.n", layout.N_ROUTED_EXPERTS, N_DIMS, layout.NOISE_STD)
    bias = noise(f"{p}.gate.e_score_correction_bias", 1, layout.N_ROUTED_EXPERTS, layout.ROUTER_BIAS_STD)[0]
    weights = {f"{p}.gate.weight": router, f"{p}.gate.e_score_correction_bias": bias}
    for expert in range(layout.N_ROUTED_EXPERTS):
        gain = layout.EXPERT_GAINS[expert % len(layout.EXPERT_GAINS)]
        expert_weights = copy_expert(f"{p}.experts.{expert}", gain)
        weights.update({name: snap_to_int4_grid(value) for name, value in expert_weights.items()})
    weights.update(copy_expert(f"{p}.shared_experts", layout.SHARED_EXPERT_GAIN))
    return weights


def layer_weights(index: int, mla: layout.MlaGeometry = CPU_MLA) -> dict[str, np.ndarray]:
    norms = (f"layers.{index}.{name}.weight" for name in ("input_layernorm", "post_attention_layernorm"))
    weights = {**{name: np.ones(layout.HIDDEN_SIZE) for name in norms}, **attention_weights(index, mla)}
    if index < layout.FIRST_K_DENSE_REPLACE:
        weights.update(noise_mlp(f"layers.{index}.mlp", layout.INTERMEDIATE_SIZE))
    else:
        weights.update(moe_weights(index))
    return weights


def checkpoint_weights(walk: Walk, mla: layout.MlaGeometry = CPU_MLA) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint under Kimi K2.6's names (float64): text model and vision tower."""
    text: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": embeddings(walk),
        "model.norm.weight": np.ones(layout.HIDDEN_SIZE),
        "lm_head.weight": lm_head(walk),
    }
    for index in range(layout.TARGET_LAYERS):
        text.update({f"model.{name}": value for name, value in layer_weights(index, mla).items()})
    return {**{PREFIX + name: value for name, value in text.items()}, **vision_weights()}
