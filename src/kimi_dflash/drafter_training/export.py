"""Write a trained drafter in the layout vLLM 0.32 loads for DFlash, and a config that serves it.

vLLM's `DFlashQwen3ForCausalLM` (`vllm/model_executor/models/qwen3_dflash.py`) reads a directory with
`config.json` (architectures [DFlashDraftModel], the Qwen3 fields, `block_size`, `dflash_config.mask_token_id` and
`target_layer_ids`) and safetensors weights named `fc.weight`, `hidden_norm.weight`, `layers.N.{input_layernorm,
self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, post_attention_layernorm, mlp.{gate,up,down}_proj}.weight`,
`norm.weight`; it takes embeddings and lm_head from the target, so none are written. The directory is built
beside its destination and swapped in whole.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from kimi_dflash.core.atomic_write import publish_directory, write_text_atomic
from kimi_dflash.drafter_training.architecture import DrafterArchitecture, serving_config

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def target_embeddings(target_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(embed_tokens, lm_head) of a target checkpoint, read from its safetensors without loading the rest. Kimi's
    wrapper names them `language_model.model.embed_tokens.weight` / `language_model.lm_head.weight`."""
    from safetensors import safe_open

    found: dict[str, torch.Tensor] = {}
    wanted = {
        "embed": ("language_model.model.embed_tokens.weight", "model.embed_tokens.weight"),
        "head": ("language_model.lm_head.weight", "lm_head.weight"),
    }
    for shard in sorted(Path(target_dir).glob("*.safetensors")):
        with safe_open(str(shard), "pt") as handle:
            names = set(handle.keys())
            for role, candidates in wanted.items():
                name = next((n for n in candidates if n in names), None)
                if name is not None and role not in found:
                    found[role] = handle.get_tensor(name).float()
    missing = [role for role in wanted if role not in found]
    if missing:
        raise ValueError(
            f"{target_dir}: no {' or '.join(wanted[missing[0]])} in its safetensors; is this the target checkpoint?"
        )
    return found["embed"], found["head"]


def export_drafter(
    weights: Mapping[str, torch.Tensor], arch: DrafterArchitecture, out_dir: Path, dtype: str = "bfloat16"
) -> Path:
    """Write config.json + model.safetensors to out_dir (replaced whole, never half-written)."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    config = serving_config(arch)
    config["torch_dtype"] = dtype
    tensors = {name: value.detach().to(DTYPES[dtype]).contiguous() for name, value in weights.items()}
    scratch = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        (scratch / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        save_file(tensors, str(scratch / "model.safetensors"), metadata={"format": "pt"})
        publish_directory(scratch, out_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out_dir


def serve_config_text(
    base_config: Path, target_dir: Path | None, drafter_dir: Path, num_speculative_tokens: int | None
) -> str:
    """An env config serving the exported drafter: the base config (EXTENDS) with the drafter set, and the target
    too when the base serves fabricated demo models (target_dir given)."""
    lines = [
        "# Written by train-drafter.sh (export phase): the base config with the trained drafter.",
        "#   ./serve.sh <this file> --wait",
        f"EXTENDS={Path(base_config).resolve()}",
    ]
    if target_dir is not None:
        lines += ["FABRICATE_DEMO_MODELS=none", f"MODEL_DIR={Path(target_dir).resolve()}"]
    lines.append(f"DRAFT_MODEL_DIR={Path(drafter_dir).resolve()}")
    if num_speculative_tokens is not None:
        lines.append(f"NUM_SPECULATIVE_TOKENS={num_speculative_tokens}")
    return "\n".join(lines) + "\n"


def write_serve_config(
    path: Path, base_config: Path, target_dir: Path | None, drafter_dir: Path, num_speculative_tokens: int | None = None
) -> Path:
    write_text_atomic(path, serve_config_text(base_config, target_dir, drafter_dir, num_speculative_tokens))
    return path


def expected_weight_names(arch: DrafterArchitecture) -> set[str]:
    """The tensor names vLLM 0.32's DFlash loader maps for this architecture."""
    names = {"fc.weight", "hidden_norm.weight", "norm.weight"}
    per_layer = (
        "input_layernorm",
        "post_attention_layernorm",
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "self_attn.q_norm",
        "self_attn.k_norm",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    )
    for layer in range(arch.num_layers):
        names |= {f"layers.{layer}.{part}.weight" for part in per_layer}
    return names


def finalize_specforge_export(out_dir: Path, arch: DrafterArchitecture) -> None:
    """After `specforge export --to hf`: config.json becomes the serving config, and every weight vLLM needs must be
    there under its name (SpecForge's HF export may prefix them with `model.`, which vLLM's loader also strips)."""
    from safetensors import safe_open

    names: set[str] = set()
    for shard in Path(out_dir).glob("*.safetensors"):
        with safe_open(str(shard), "pt") as handle:
            names |= {name.removeprefix("model.") for name in handle.keys()}  # noqa: SIM118 (not a dict)
    missing = sorted(expected_weight_names(arch) - names)
    if missing:
        raise ValueError(
            f"{out_dir}: SpecForge's export lacks {len(missing)} weight(s) vLLM's DFlash loader needs, "
            f"e.g. {missing[:3]}"
        )
    config = serving_config(arch)
    write_text_atomic(Path(out_dir) / "config.json", json.dumps(config, indent=2) + "\n")
