"""The kimi-eagle3 demo drafter (demo/kimi/eagle3_drafter.py): an EAGLE3-MLA drafter for the miniature Kimi, the
CPU demo's second drafter kind. Its config and checkpoint have the shape vLLM 0.32's Eagle3DeepseekV3ForCausalLM
loads; its one decoder layer, written out here in numpy from the weights (MLA attention over cached positions,
post-attention norm, MLP, final norm, the target's lm_head), proposes the walk's next token except on the seeded
missed phases. Served: the shoot-out in tests/integration/test_qualify_server.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="needs the cpu extra (launchers/setup-cpu.sh)")

from kimi_dflash.demo import ensure_demo_models, geometry
from kimi_dflash.demo.fabricate import Fabrication
from kimi_dflash.demo.kimi import eagle3_drafter, layout, target
from kimi_dflash.demo.kimi import fabricate as kimi_fabricate

H = layout.HIDDEN_SIZE


@pytest.fixture(scope="module")
def base() -> Fabrication:
    return kimi_fabricate.fabricate()


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float = target.text_config()["rms_norm_eps"]) -> np.ndarray:
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def propose(weights: dict[str, np.ndarray], embeddings: np.ndarray, head: np.ndarray, tokens: list[int]) -> int:
    """The drafter's proposal after the last of `tokens` (every earlier one cached): one step of
    deepseek_eagle3.py's layer with norm_before_residual, the hidden state zeroed by hidden_norm's zero weight."""
    w = {name: value.astype(np.float64) for name, value in weights.items()}
    p = "midlayer"
    hidden = np.zeros((len(tokens), H))  # whatever the target or the previous step passed in
    residual = rms_norm(hidden, w[f"{p}.hidden_norm.weight"])
    x = np.concatenate([rms_norm(embeddings[tokens], w[f"{p}.input_layernorm.weight"]), residual], axis=-1)
    q_latent = rms_norm(x @ w[f"{p}.self_attn.q_a_proj.weight"].T, w[f"{p}.self_attn.q_a_layernorm.weight"])
    q = (q_latent @ w[f"{p}.self_attn.q_b_proj.weight"].T)[:, : layout.QK_NOPE_HEAD_DIM]
    kv = x @ w[f"{p}.self_attn.kv_a_proj_with_mqa.weight"].T
    latent = rms_norm(kv[:, : layout.KV_LORA_RANK], w[f"{p}.self_attn.kv_a_layernorm.weight"])
    kv_b = latent @ w[f"{p}.self_attn.kv_b_proj.weight"].T
    keys, values = kv_b[:, : layout.QK_NOPE_HEAD_DIM], kv_b[:, layout.QK_NOPE_HEAD_DIM :]
    # DeepSeek YaRN softmax scale (mscale_all_dim 1)
    mscale = 0.1 * math.log(target.text_config()["rope_scaling"]["factor"]) + 1.0
    scale = (layout.QK_NOPE_HEAD_DIM + layout.QK_ROPE_HEAD_DIM) ** -0.5 * mscale**2
    scores = keys @ q[-1] * scale  # rope parts are zero in both query and key
    attended = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum() @ values
    out = attended @ w[f"{p}.self_attn.o_proj.weight"].T
    residual = residual[-1] + out
    normed = rms_norm(residual, w[f"{p}.post_attention_layernorm.weight"])
    mlp = (silu(normed @ w[f"{p}.mlp.gate_proj.weight"].T) * (normed @ w[f"{p}.mlp.up_proj.weight"].T)) @ w[
        f"{p}.mlp.down_proj.weight"
    ].T
    final = rms_norm(residual + mlp, w["norm.weight"])
    return int(np.argmax(head @ final))


def test_config_is_what_vllm_loads_as_eagle3_mla(base: Fabrication) -> None:
    config = eagle3_drafter.drafter_config(base.walk)
    assert config["architectures"] == ["Eagle3DeepseekV3ForCausalLM"] and config["num_hidden_layers"] == 1
    assert config["model_type"] == "deepseek_v2"  # deepseek_v3 would be rewritten into an MTP draft by vLLM
    assert (config["kv_lora_rank"], config["qk_rope_head_dim"]) == (512, 64)  # the target's 576-wide MLA pages
    aux = config["eagle_aux_hidden_state_layer_ids"]
    assert len(set(aux)) == 3 and max(aux) < layout.TARGET_LAYERS and config["norm_before_residual"] is True
    weights = eagle3_drafter.drafter_weights(base.walk)
    assert weights["fc.weight"].shape == (H, 3 * H) and not weights["fc.weight"].any()
    assert weights["midlayer.self_attn.q_a_proj.weight"].shape == (layout.Q_LORA_RANK, 2 * H)
    assert not any("embed_tokens" in name or "lm_head" in name for name in weights)  # shared from the target


def test_it_proposes_the_walks_next_token_except_on_the_missed_phases(base: Fabrication) -> None:
    walk = base.walk
    weights = eagle3_drafter.drafter_weights(walk)
    embeddings, head = target.embeddings(walk), target.lm_head(walk)
    missed = set(walk.missed_phases.tolist())
    rng = np.random.default_rng(3)
    phases = [*walk.missed_phases[:6].tolist(), *rng.choice(walk.length, 30, replace=False).tolist()]
    for phase in phases:
        context = [walk.cycle[int(p)] for p in rng.choice(walk.length, 40, replace=False) if p != phase]
        proposal = propose(weights, embeddings, head, [*context, walk.cycle[phase]])
        jump = eagle3_drafter.DRAFTER_MISS_JUMP if phase in missed else 0
        assert proposal == walk.cycle[(phase + jump + 1) % walk.length], phase


def test_every_miss_neuron_fires_only_on_its_phase(base: Fabrication) -> None:
    """The neurons have no threshold (no constant reaches the MLP): off their phase they must stay small enough
    never to move the argmax. Checked on every phase's code."""
    walk = base.walk
    weights = eagle3_drafter.drafter_weights(walk)
    gate, up, down = (weights[f"midlayer.mlp.{n}_proj.weight"].astype(np.float64) for n in ("gate", "up", "down"))
    head = target.lm_head(walk)
    codes = geometry.phase_codes(np.arange(walk.length), walk.frequencies, walk.length)
    missed = set(walk.missed_phases.tolist())
    for phase in range(walk.length):
        residual = np.zeros(H)
        residual[layout.G] = math.sqrt(H) * codes[phase]  # the copied code after post_attention_layernorm
        out = residual + down @ (silu(gate @ residual) * (up @ residual))
        jump = eagle3_drafter.DRAFTER_MISS_JUMP if phase in missed else 0
        assert int(np.argmax(head @ out)) == walk.cycle[(phase + jump + 1) % walk.length], phase


def test_the_bundle_serves_method_eagle3(tmp_path) -> None:
    models = ensure_demo_models(tmp_path, choice="kimi-eagle3")
    assert sorted(p.name for p in models.bundle_dir.iterdir()) == ["drafter", "manifest.json", "target"]
    assert models.speculative_config(3) == {
        "method": "eagle3",
        "model": str(models.drafter_dir),
        "num_speculative_tokens": 3,
    }
    assert json.loads((models.drafter_dir / "config.json").read_text())["architectures"] == [
        "Eagle3DeepseekV3ForCausalLM"
    ]
