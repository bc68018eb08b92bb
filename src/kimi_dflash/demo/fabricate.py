"""Every file of the demo bundle in memory, a pure function of the shipped corpus and layout (heavy imports here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kimi_dflash.demo import drafter, geometry, layout, target, tokenizer
from kimi_dflash.demo.encoding import json_bytes
from kimi_dflash.demo.kimi.checkpoint import SAFETENSORS_METADATA
from kimi_dflash.demo.walk import Walk, build_walk

TARGET = "target"
DRAFTER = "drafter"


@dataclass(frozen=True)
class Fabrication:
    files: dict[str, bytes]  # bundle-relative path -> content (manifest excluded)
    walk: Walk
    mask_token_id: int
    summary: dict[str, object]  # facts recorded in the manifest (cycle length, miss rate, ...)


def fabricate(progress: Callable[[str], None] = lambda message: None) -> Fabrication:
    from safetensors.numpy import save

    fix = "raise QK_NORM_WEIGHT or lower ROPE_THETA in kimi_dflash/demo/layout.py"
    heads = (layout.HEAD_DIM, layout.ROPE_THETA, layout.QK_NORM_WEIGHT)
    context = (layout.MAX_POSITION_EMBEDDINGS + layout.DRAFTER_BLOCK_SIZE, *heads, layout.MIN_ATTENTION_LOGIT_GAP)
    gap = geometry.checked_attention_gap("the Qwen3 demo's", fix, *context)
    progress("training the byte-level BPE tokenizer on the shipped corpus")
    corpus = tokenizer.read_corpus()
    tok = tokenizer.train_tokenizer(corpus)
    mask_token_id = tok.token_to_id(layout.MASK_TOKEN)
    walk = build_walk(tok.encode(corpus).ids, tok.get_vocab_size())
    progress(walk.describe())

    progress(
        f"building the target (Qwen3, {layout.TARGET_LAYERS} layers) and the DFlash drafter "
        f"({layout.DRAFTER_LAYERS} layers)"
    )
    roles = {"bos_token": None, "eos_token": layout.EOS_TOKEN, "pad_token": layout.EOS_TOKEN, "unk_token": None}
    template, additional = tokenizer.chat_template("qwen3-chat-template"), list(layout.SPECIAL_TOKENS[1:])
    tokenizer_part = tokenizer.tokenizer_files(tok, roles, additional, template, layout.MAX_POSITION_EMBEDDINGS)
    files = {f"{TARGET}/{name}": content for name, content in tokenizer_part.items()}
    files[f"{TARGET}/config.json"] = json_bytes(target.target_config(walk))
    files[f"{TARGET}/generation_config.json"] = json_bytes(target.generation_config())
    files[f"{TARGET}/model.safetensors"] = save(target.target_weights(walk), metadata=SAFETENSORS_METADATA)
    files[f"{DRAFTER}/config.json"] = json_bytes(drafter.drafter_config(walk, mask_token_id))
    files[f"{DRAFTER}/model.safetensors"] = save(drafter.drafter_weights(walk), metadata=SAFETENSORS_METADATA)

    summary = {
        **walk_summary(walk, mask_token_id),
        "tokenizer_size": walk.tokenizer_size,
        "attention_logit_gap": round(gap, 3),
    }
    return Fabrication(files=files, walk=walk, mask_token_id=mask_token_id, summary=summary)


def walk_summary(walk: Walk, mask_token_id: int) -> dict[str, object]:
    """The manifest facts every demo bundle records about its walk and drafter."""
    return {
        "cycle_length": walk.length,
        "vocab_size": walk.vocab_size,
        "mask_token_id": mask_token_id,
        "target_layer_ids": list(layout.TARGET_LAYER_IDS),
        "max_num_speculative_tokens": layout.MAX_NUM_SPECULATIVE_TOKENS,
        "drafter_miss_rate": round(len(walk.missed_phases) / walk.length, 6),
        "expected_acceptance_per_position": [round(a, 4) for a in walk.acceptance_profile(8)],
        "phase_code_max_sidelobe": round(walk.max_sidelobe, 6),
    }
