"""The SpecForge 0.2 run config (`specforge train --config FILE`; keys checked by specforge_schema.py) and its data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_dflash.drafter_training.architecture import EMBED_KEYS, LM_HEAD_KEYS, DrafterArchitecture

# Kimi K2.6 thinks by default; SpecForge 0.2.0 registers this template for it.
KIMI_CHAT_TEMPLATE = "kimi-k2-thinking"


@dataclass(frozen=True)
class RunSettings:
    target_model_path: str
    draft_config_path: Path
    train_data_path: Path
    output_dir: Path
    gpus: int
    epochs: int = 6
    learning_rate: float = 6e-4
    max_length: int = 3072
    save_interval: int = 1000
    chat_template: str = KIMI_CHAT_TEMPLATE
    embedding_key: str = EMBED_KEYS[0]  # Kimi's
    lm_head_key: str = LM_HEAD_KEYS[0]


def split_gpus(gpus: int) -> tuple[list[str], list[str]]:
    """(capture server devices, trainer devices): disjoint for SpecForge 0.2.0; Kimi K2.6 fits in half a node."""
    if gpus < 2:
        raise ValueError(f"{gpus} GPU(s): SpecForge 0.2.0 trains on 2 or more (capture server, trainer on others)")
    capture = gpus // 2
    return [str(i) for i in range(capture)], [str(i) for i in range(capture, gpus)]


def run_config(arch: DrafterArchitecture, s: RunSettings) -> dict[str, Any]:
    """Online training, run disaggregated: `managed_local` starts SGLang, Mooncake here (docs/drafter-training.md)."""
    capture, trainer = split_gpus(s.gpus)
    training: dict[str, Any] = {
        "strategy": "dflash",
        "role": "auto",
        "num_epochs": s.epochs,
        "learning_rate": s.learning_rate,
        "save_interval": s.save_interval,
        "max_checkpoints": 2,  # each holds weights + fp32 Adam state: ~16 bytes per drafter parameter
        "batch_size": 1,
    }
    model: dict[str, Any] = {
        "target_model_path": s.target_model_path,
        "draft_model_config": str(s.draft_config_path),
        "mask_token_id": arch.mask_token_id,
        "draft_block_size": arch.block_size,
        "trust_remote_code": True,
        "torch_dtype": "bfloat16",
        "embedding_key": s.embedding_key,
        "lm_head_key": s.lm_head_key,
    }
    output = Path(s.output_dir)
    checkpoints = [p.parent for p in output.rglob("*.safetensors")] if output.is_dir() else []
    if checkpoints:
        # managed_local refuses training.resume_from in SpecForge 0.2.0: restart from the newest weights.
        model["draft_checkpoint_path"] = str(max(checkpoints, key=lambda p: p.stat().st_mtime))
    return {
        "run_id": "kimi-k2.6-dflash",
        "output_dir": str(s.output_dir),
        "model": model,
        "data": {
            "train_data_path": str(s.train_data_path),
            "max_length": s.max_length,
            "chat_template": s.chat_template,
        },
        "training": training,
        "deployment": {
            "mode": "disaggregated",
            "trainer": {"nproc_per_node": len(trainer)},
            "disaggregated": {
                "control_dir": str(Path(s.output_dir).parent / "control"),
                "backend": "mooncake",
                "managed_local": {
                    "trainer_cuda_visible_devices": trainer,
                    "capture_servers": [{"port": 30000, "cuda_visible_devices": capture, "tp_size": len(capture)}],
                },
            },
        },
    }


def training_record(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """A regen record as SpecForge's conversation data; Kimi's reasoning before the reply, in its think tags."""
    turns = []
    for turn in record.get("conversations") or []:
        content = turn.get("content") or ""
        if turn.get("role") == "assistant" and turn.get("reasoning_content"):
            content = f"<think>{turn['reasoning_content']}</think>{content}"
        turns.append({"role": turn["role"], "content": content})
    if not turns or turns[-1]["role"] != "assistant" or not turns[-1]["content"]:
        return None
    return {"id": record["id"], "conversations": turns}
