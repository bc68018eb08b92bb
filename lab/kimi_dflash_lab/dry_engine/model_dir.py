"""The checkpoint directories the dry engine hands vLLM: config.json (+ a tokenizer for the target), no weights.

vLLM's `create_engine_config` reads the target's config.json and loads its tokenizer; model construction on the
meta device needs the full architecture. For each of target and drafter:

- MODEL_DIR / DRAFT_MODEL_DIR holds a config.json: that directory, as is (the real checkpoint, or a demo model);
- else the facts shipped for MODEL_REPO / DRAFT_MODEL_REPO (kimi_dflash/data/checkpoints) are completed into a
  config.json in a temporary directory: the shipped subset wins; the rest of Kimi K2's architecture (DeepSeek-V3
  dimensions) and the quantisation `ignore` list are the public Kimi K2 config's values (KIMI_K2_TEXT below), the
  vision tower and the tokenizer are the fabricated demo Kimi's (Kimi's real tokenizer needs tiktoken and remote
  code). Each substitution is listed in the report.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from kimi_dflash.checkpoint import SHIPPED

# Kimi K2's text model as its public config.json states it (DeepSeek-V3 layout); the shipped facts override.
KIMI_K2_TEXT: dict[str, Any] = {
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 1,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 163840,
    "max_position_embeddings": 262144,
}
# Modules the INT4 checkpoint keeps in BF16 (attention, shared experts, dense MLPs, lm_head, vision): only the
# routed experts are WNA16.
KIMI_QUANT_IGNORE = [
    "lm_head",
    "re:.*self_attn.*",
    "re:.*shared_experts.*",
    r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
    "re:.*vision_tower.*",
    "re:.*mm_projector.*",
]
# Checkpoints whose config.json is not public, judged with a published sibling's: the matched K2.6 drafter is a gated
# preview; configs/kimi-k2.6-dflash-draft.json (what the project trains as K2.6's drafter) keeps K2.5's architecture.
STAND_INS = {"z-lab/Kimi-K2.6-DFlash": "z-lab/Kimi-K2.5-DFlash"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
OPTIONAL_FILES = ("preprocessor_config.json",)


class DryModelError(Exception):
    """No config.json can be given to vLLM for a checkpoint (message names what is missing and the fix)."""


@dataclass(frozen=True)
class DryCheckpoint:
    path: Path
    origin: str  # where its config.json came from, for the report


def checkpoint_dir(
    role: str, model_dir: Path | None, repo: str | None, workdir: Path, demo_target: Path | None
) -> DryCheckpoint:
    """The directory vLLM reads for `role` ("target" or "drafter"), writing a temporary one under `workdir` when
    the checkpoint is not on disk."""
    if model_dir is not None and (model_dir / "config.json").is_file():
        return DryCheckpoint(model_dir, f"{model_dir}/config.json")
    name = SHIPPED.get(repo or "")
    stand_in = ""
    if name is None and repo in STAND_INS:
        name, stand_in = SHIPPED[STAND_INS[repo]], f" (standing in for {repo}, whose config.json is not public)"
    if name is None:
        where = f"{model_dir}/config.json" if model_dir is not None else f"no {role} directory"
        raise DryModelError(f"no config.json for the {role}: {where} is missing and no facts ship for {repo!r}")
    facts = json.loads(resources.files("kimi_dflash").joinpath("data", "checkpoints", name).read_text("utf-8"))
    facts.pop("_about", None)
    out = workdir / role
    out.mkdir(parents=True, exist_ok=True)
    origin = f"kimi_dflash/data/checkpoints/{name}{stand_in or f' for {repo}'}"
    if role == "target":
        if demo_target is None or not (demo_target / "config.json").is_file():
            raise DryModelError(
                "the target's config.json must be completed from the demo Kimi (vision tower, tokenizer), which is "
                "not built: run `python -m kimi_dflash.demo --model kimi` once"
            )
        facts = complete_kimi_config(facts, json.loads((demo_target / "config.json").read_text("utf-8")))
        for file in TOKENIZER_FILES + OPTIONAL_FILES:
            if (demo_target / file).is_file():
                shutil.copyfile(demo_target / file, out / file)
        origin += " + Kimi K2 architecture constants; vision tower and tokenizer from the demo Kimi"
    (out / "config.json").write_text(json.dumps(facts, indent=1), encoding="utf-8")
    return DryCheckpoint(out, origin)


def complete_kimi_config(facts: dict[str, Any], demo: dict[str, Any]) -> dict[str, Any]:
    """The demo Kimi's config (KimiK25 wrapper, every key vLLM reads) with Kimi K2's dimensions, then the shipped
    facts on top; the quantisation keeps the shipped config_groups and gains the ignore list."""
    config = json.loads(json.dumps(demo))
    text = {**config.get("text_config", {}), **KIMI_K2_TEXT, **facts.get("text_config", {})}
    quant = text.get("quantization_config")
    if isinstance(quant, dict) and "ignore" not in quant:
        text["quantization_config"] = {**quant, "ignore": list(KIMI_QUANT_IGNORE)}
    config.update({k: v for k, v in facts.items() if k != "text_config"})
    config["text_config"] = text
    if isinstance(config.get("vision_config"), dict):
        config["vision_config"]["text_hidden_size"] = text["hidden_size"]
    return config
