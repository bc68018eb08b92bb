"""What the rules know about a checkpoint, from MODEL_DIR/config.json or, before the download (a 555 GB checkpoint is
rarely there when someone asks "will this start?"), the facts shipped for the configured repo; reports say which.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kimi_dflash.plan import has_sliding_window

# Hugging Face repo -> file under kimi_dflash/data/checkpoints (a subset of that repo's config.json).
SHIPPED: dict[str, str] = {
    "moonshotai/Kimi-K2.6": "kimi-k2.6.json",
    "z-lab/Kimi-K2.5-DFlash": "kimi-k2.5-dflash.json",
    "z-lab/Kimi-K2.6-DFlash": "kimi-k2.6-dflash.json",  # the same shape as K2.5's (the file says why)
}


@dataclass(frozen=True)
class Wna16Experts:
    num_bits: int
    group_size: int | None  # None: channel-wise
    pack_format: str

    def describe(self) -> str:
        group = f"group {self.group_size}" if self.group_size else "channel-wise"
        return f"compressed-tensors WNA16 int{self.num_bits}, {group}, {self.pack_format}"


@dataclass(frozen=True)
class CheckpointFacts:
    role: str  # "target" or "drafter"
    origin: str  # the file the facts came from
    shipped: bool  # True: the project's copy, because the checkpoint directory is not there
    architectures: tuple[str, ...]
    mla: bool
    routed_experts: int
    wna16_experts: Wna16Experts | None
    sliding_window: bool
    attention_heads: int | None = None  # num_attention_heads (the AITER MLA verify rule pads heads per rank)
    quantization: str | None = None  # quantization_config.quant_method, for any weight-quantised checkpoint
    # config.json with text_config merged under the top level (the top level wins, as in vLLM)
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def describe(self) -> str:
        parts = [", ".join(self.architectures) or "architecture unknown"]
        if self.mla:
            parts.append("MLA attention")
        if self.routed_experts:
            parts.append(f"{self.routed_experts} routed experts")
        if self.wna16_experts is not None:
            parts.append(f"experts {self.wna16_experts.describe()}")
        if self.sliding_window:
            parts.append("sliding-window layers")
        return "; ".join(parts)

    def where(self) -> str:
        if self.shipped:
            return f"shipped facts ({self.origin}), because the checkpoint directory does not exist"
        return self.origin


def read_checkpoint_facts(model_dir: Path | None, repo: str | None, role: str) -> CheckpointFacts | None:
    """From `model_dir`/config.json if it exists, else the shipped copy for `repo`, else None."""
    if model_dir is not None and (Path(model_dir) / "config.json").is_file():
        path = Path(model_dir) / "config.json"
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # preflight's model-dir check reports an unreadable config.json with its fix
        return facts_from_config(config, str(path), role, shipped=False) if isinstance(config, dict) else None
    name = SHIPPED.get(repo or "")
    if name is None:
        return None
    text = resources.files("kimi_dflash").joinpath("data", "checkpoints", name).read_text(encoding="utf-8")
    return facts_from_config(json.loads(text), f"kimi_dflash/data/checkpoints/{name} for {repo}", role, shipped=True)


def facts_from_config(config: Mapping[str, Any], origin: str, role: str, *, shipped: bool) -> CheckpointFacts:
    # Multimodal wrappers (KimiK25ForConditionalGeneration) nest the language model under text_config; vLLM
    # reads quantization_config from the top level first, then from text_config, and so does this.
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    merged = {**text, **{k: v for k, v in config.items() if k != "text_config"}}
    quant = config.get("quantization_config") or text.get("quantization_config")
    experts = next(
        (
            int(merged[k])
            for k in ("n_routed_experts", "num_experts", "num_local_experts")
            if isinstance(merged.get(k), int)
        ),
        0,
    )
    return CheckpointFacts(
        role=role,
        origin=origin,
        shipped=shipped,
        architectures=tuple(str(a) for a in config.get("architectures") or ()),
        mla=bool(merged.get("kv_lora_rank")),
        routed_experts=experts,
        wna16_experts=_wna16_experts(quant) if experts else None,
        sliding_window=has_sliding_window(merged),
        attention_heads=heads if isinstance(heads := merged.get("num_attention_heads"), int) else None,
        quantization=str(quant.get("quant_method") or "unknown") if isinstance(quant, dict) else None,
        config=merged,
    )


def _wna16_experts(quant: object) -> Wna16Experts | None:
    if not isinstance(quant, dict) or quant.get("quant_method") != "compressed-tensors":
        return None
    for group in (quant.get("config_groups") or {}).values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict) or weights.get("type") != "int" or group.get("input_activations"):
            continue
        if weights.get("num_bits") in (4, 8) and weights.get("strategy") in ("group", "channel"):
            return Wna16Experts(
                num_bits=int(weights["num_bits"]),
                group_size=weights.get("group_size") if weights.get("strategy") == "group" else None,
                pack_format=str(group.get("format") or quant.get("format") or "?"),
            )
    return None
