"""A trained drafter in the layout vLLM 0.32 loads for DFlash (embeddings, lm_head: the target's), swapped in whole."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from kimi_dflash.core.atomic_write import publish_directory, write_json_atomic, write_text_atomic
from kimi_dflash.drafter_training.architecture import EMBED_KEYS, LM_HEAD_KEYS, DrafterArchitecture, serving_config
from kimi_dflash.drafter_training.model import drafter_shapes


def target_embeddings(target_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(embed_tokens, lm_head) of a target checkpoint, read from its safetensors without loading the rest."""
    from safetensors import safe_open

    found: dict[str, torch.Tensor] = {}
    for shard in sorted(Path(target_dir).glob("*.safetensors")):
        with safe_open(str(shard), "pt") as handle:
            for name in set(handle.keys()) & {*EMBED_KEYS, *LM_HEAD_KEYS}:
                found[name] = handle.get_tensor(name).float()

    def first(names: tuple[str, ...]) -> torch.Tensor:
        tensor = next((found[name] for name in names if name in found), None)
        if tensor is None:
            raise ValueError(f"{target_dir}: no {' or '.join(names)} in its safetensors; is it the target?")
        return tensor

    return first(EMBED_KEYS), first(LM_HEAD_KEYS)


def export_drafter(
    weights: Mapping[str, torch.Tensor], arch: DrafterArchitecture, out_dir: Path, dtype: torch.dtype = torch.bfloat16
) -> Path:
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    config = {**serving_config(arch), "torch_dtype": str(dtype).removeprefix("torch.")}
    scratch = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        write_json_atomic(scratch / "config.json", config)
        tensors = {name: value.detach().to(dtype).contiguous() for name, value in weights.items()}
        save_file(tensors, str(scratch / "model.safetensors"), metadata={"format": "pt"})
        publish_directory(scratch, out_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out_dir


def write_serve_config(path: Path, base_config: Path, target_dir: Path | None, drafter_dir: Path) -> None:
    """An env config EXTENDing the base with the drafter set (and the target when the base fabricates demo models)."""
    lines = [
        "# Written by train-drafter.sh (export phase): the base config with the trained drafter.",
        "#   ./serve.sh <this file> --wait",
        f"EXTENDS={Path(base_config).resolve()}",
    ]
    if target_dir is not None:
        lines += ["FABRICATE_DEMO_MODELS=none", f"MODEL_DIR={Path(target_dir).resolve()}"]
    lines.append(f"DRAFT_MODEL_DIR={Path(drafter_dir).resolve()}")
    write_text_atomic(path, "\n".join(lines) + "\n")


def finalize_specforge_export(out_dir: Path, arch: DrafterArchitecture) -> None:
    """After `specforge export --to hf`: config.json made the serving config, each weight vLLM needs checked."""
    from safetensors import safe_open

    names: set[str] = set()
    for shard in Path(out_dir).glob("*.safetensors"):
        with safe_open(str(shard), "pt") as handle:
            names |= {name.removeprefix("model.") for name in handle.keys()}  # noqa: SIM118 (not a dict)
    missing = sorted(set(drafter_shapes(arch.config)) - names)
    if missing:
        raise ValueError(f"{out_dir}: SpecForge's export lacks {len(missing)} weight(s) vLLM needs, e.g. {missing[:3]}")
    write_json_atomic(Path(out_dir) / "config.json", serving_config(arch))
