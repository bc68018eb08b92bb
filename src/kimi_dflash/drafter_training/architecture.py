"""The drafter to train (`configs/kimi-k2.6-dflash-draft.json` or the demo's), checked against its target, and its
two derived configs: SpecForge's draft config and vLLM's config.json. Training declares full attention: vLLM 0.32
attends non-causally over context + block, SpecForge 0.2.0 trains windows causally (docs/drafter-training.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_dflash.checkpoint import read_rope
from kimi_dflash.core.user_files import UnreadableFile, read_user_json
from kimi_dflash.rules.rope_amplitude import transformers_amplitude

DRAFT_ARCHITECTURE = "DFlashDraftModel"
# Keys vLLM's DFlash loader reads from dflash_config that only shape serving (not the trained weights).
SERVING_ONLY_DFLASH_KEYS = ("use_swa", "swa_window_size", "causal")
# Where a target keeps the embeddings and lm_head the drafter shares: Kimi's (under `language_model.`), a plain LM's.
EMBED_KEYS = ("language_model.model.embed_tokens.weight", "model.embed_tokens.weight")
LM_HEAD_KEYS = ("language_model.lm_head.weight", "lm_head.weight")


class ArchitectureError(ValueError):
    """A drafter config that cannot be trained or served as asked; the message names the key and the fix."""


@dataclass(frozen=True)
class DrafterArchitecture:
    source: str  # where the config came from (for messages)
    config: Mapping[str, Any]  # the drafter's config.json

    @property
    def block_size(self) -> int:
        return int(self.config["block_size"])

    @property
    def mask_token_id(self) -> int:
        return int(self.config["dflash_config"]["mask_token_id"])

    @property
    def target_layer_ids(self) -> tuple[int, ...]:
        return tuple(int(i) for i in self.config["dflash_config"]["target_layer_ids"])

    @property
    def sliding_window(self) -> int | None:
        dflash = self.config.get("dflash_config") or {}
        if not dflash.get("use_swa"):
            return None
        return int(dflash.get("swa_window_size") or self.config.get("sliding_window") or 0) or None

    def parameter_count(self) -> int:
        """Trainable parameters (embeddings and lm_head are the target's, frozen and not counted)."""
        c = self.config
        hidden, heads, kv_heads = int(c["hidden_size"]), int(c["num_attention_heads"]), int(c["num_key_value_heads"])
        head_dim, inter = int(c["head_dim"]), int(c["intermediate_size"])
        attention = hidden * head_dim * (2 * heads + 2 * kv_heads) + 2 * head_dim  # q, o, k, v + q/k norms
        mlp = 3 * hidden * inter
        per_layer = attention + mlp + 2 * hidden  # + the two layer norms
        return int(c["num_hidden_layers"]) * per_layer + len(self.target_layer_ids) * hidden * hidden + 2 * hidden


REQUIRED_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "vocab_size",
    "rope_theta",
    "block_size",
)


def load_architecture(path: Path) -> DrafterArchitecture:
    try:
        config = read_user_json(path, what="drafter config (--drafter-config: a DFlash config.json)")
    except UnreadableFile as error:
        raise ArchitectureError(str(error)) from None
    if not isinstance(config, dict):
        raise ArchitectureError(f"{path}: a drafter config is a JSON object")
    architecture = DrafterArchitecture(str(path), config)
    check_architecture(architecture)
    return architecture


def check_architecture(arch: DrafterArchitecture) -> None:
    """Raise ArchitectureError on a config SpecForge or vLLM would reject or misread."""
    c, where = arch.config, arch.source
    if list(c.get("architectures") or []) != [DRAFT_ARCHITECTURE]:
        raise ArchitectureError(f"{where}: architectures {c.get('architectures')!r} must be [{DRAFT_ARCHITECTURE!r}]")
    if c.get("model_type") != "qwen3":
        raise ArchitectureError(f"{where}: model_type must be 'qwen3' (DFlash layers), got {c.get('model_type')!r}")
    missing = [key for key in REQUIRED_KEYS if not isinstance(c.get(key), (int, float)) or isinstance(c.get(key), bool)]
    if missing:
        raise ArchitectureError(f"{where}: missing or non-numeric {', '.join(missing)}")
    dflash = c.get("dflash_config")
    if not isinstance(dflash, dict) or not isinstance(dflash.get("mask_token_id"), int):
        raise ArchitectureError(f"{where}: dflash_config.mask_token_id (the id fed to masked slots) must be set")
    layer_ids = dflash.get("target_layer_ids")
    if not isinstance(layer_ids, list) or not layer_ids or not all(isinstance(i, int) for i in layer_ids):
        raise ArchitectureError(f"{where}: dflash_config.target_layer_ids must list the target layers to read")
    if layer_ids != sorted(set(layer_ids)) or layer_ids[0] < 0:
        raise ArchitectureError(f"{where}: target_layer_ids must be distinct, increasing and >= 0: {layer_ids}")
    if arch.block_size < 2:
        raise ArchitectureError(f"{where}: block_size must be >= 2 (the anchor token plus at least one draft)")
    if int(c["num_attention_heads"]) % int(c["num_key_value_heads"]):
        raise ArchitectureError(f"{where}: num_attention_heads must be a multiple of num_key_value_heads")
    if not 0 <= arch.mask_token_id < int(c["vocab_size"]):
        vocab = f"outside the vocabulary (vocab_size {c['vocab_size']})"
        raise ArchitectureError(f"{where}: mask_token_id {arch.mask_token_id} is {vocab}")


def check_against_target(arch: DrafterArchitecture, target_config: Mapping[str, Any], max_length: int) -> None:
    """The drafter reads the target's hidden states and shares its embeddings: sizes must match."""
    text = target_config.get("text_config") if isinstance(target_config.get("text_config"), dict) else {}
    merged = {**target_config, **text}
    target_layers, hidden = int(merged.get("num_hidden_layers", 0)), int(merged.get("hidden_size", 0))
    vocab, where = int(merged.get("vocab_size", 0)), arch.source
    if hidden != int(arch.config["hidden_size"]):
        shared = "the drafter shares the target's embeddings and lm_head"
        raise ArchitectureError(f"{where}: hidden_size {arch.config['hidden_size']} != the target's {hidden}: {shared}")
    if vocab and vocab != int(arch.config["vocab_size"]):
        raise ArchitectureError(f"{where}: vocab_size {arch.config['vocab_size']} differs from the target's {vocab}")
    if max(arch.target_layer_ids) >= target_layers:
        layers = f"target_layer_ids {list(arch.target_layer_ids)} name layers the target does not have"
        raise ArchitectureError(f"{where}: {layers} (it has {target_layers})")
    window = arch.sliding_window
    if window is not None and window < max_length + arch.block_size:
        narrower = f"narrower than a training sequence ({max_length} + block {arch.block_size})"
        raise ArchitectureError(f"{where}: swa_window_size {window} is {narrower}: serving would not attend as trained")


def specforge_draft_config(arch: DrafterArchitecture) -> dict[str, Any]:
    """The draft config SpecForge 0.2.0 builds its DFlashDraftModel from (`model.draft_model_config`)."""
    config = {key: value for key, value in arch.config.items() if key != "dflash_config"}
    config["dflash_config"] = {
        key: value for key, value in arch.config["dflash_config"].items() if key not in SERVING_ONLY_DFLASH_KEYS
    }
    # transformers' Qwen3Config reads these; SpecForge resolves its attention layout from layer_types.
    layer_types = ["full_attention"] * int(arch.config["num_hidden_layers"])
    config.update(layer_types=layer_types, use_sliding_window=False, sliding_window=None)
    return config


def serving_config(arch: DrafterArchitecture) -> dict[str, Any]:
    """config.json for vLLM 0.32's DFlashQwen3ForCausalLM, pinning the amplitude it was trained at (SpecForge: 1.0)
    with an explicit `attention_factor` (honoured from vLLM 0.30, left alone by launch/drafter_rope.py)."""
    config = dict(arch.config)
    rope = read_rope(config)
    if rope is not None and rope.kind == "yarn" and rope.problem is None and rope.attention_factor is None:
        config.update({f: {**config[f], "attention_factor": transformers_amplitude(rope)} for f in rope.fields})
    return config
