"""The demo's offline training features as SpecForge 0.2.0's `specforge_hidden_states_v1` samples, one atomic
`<id>.ckpt` per conversation (a capture resumes); the target runs in transformers (docs/drafter-training.md)."""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimi_dflash.checkpoint import read_config
from kimi_dflash.core.atomic_write import replacing

if TYPE_CHECKING:
    import torch

FEATURE_SUFFIX = ".ckpt"


class FeatureError(ValueError):
    pass


@dataclass(frozen=True)
class Sample:
    id: str
    input_ids: list[int]
    loss_mask: list[int]


def sample_from_record(record: Mapping[str, Any], max_length: int) -> Sample | None:
    """Token ids and loss mask of a regen record, truncated; None with fewer than two reply tokens (anchor + next)."""
    prompt, output = record.get("prompt_token_ids"), record.get("output_token_ids")
    if not isinstance(prompt, list) or not isinstance(output, list):
        raise FeatureError(f"regen record {record.get('id')!r} has no token ids: regenerate through serve.sh's vLLM")
    ids = [int(t) for t in prompt] + [int(t) for t in output]
    mask = [0] * len(prompt) + [1] * len(output)
    ids, mask = ids[:max_length], mask[:max_length]
    if sum(mask) < 2:
        return None
    return Sample(str(record["id"]), ids, mask)


def load_kimi_text_model(target_dir: Path):  # type: ignore[no-untyped-def]
    """The miniature Kimi's text model as transformers' DeepseekV3ForCausalLM, float32 (Kimi's own class would also
    build the vision tower, ignoring the miniature's vision_config)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV3ForCausalLM

    text_config = read_config(target_dir, "target")["text_config"]
    text_config.pop("quantization_config", None)
    prefix = "language_model."
    shards = (load_file(str(shard)) for shard in sorted(target_dir.glob("model-*.safetensors")))  # one at a time
    kept = ((name, value) for shard in shards for name, value in shard.items() if name.startswith(prefix))
    weights = {name[len(prefix) :]: value.float() for name, value in kept}
    with tempfile.TemporaryDirectory(prefix="kimi-text-") as scratch:
        (Path(scratch) / "config.json").write_text(json.dumps({**text_config, "model_type": "deepseek_v3"}))
        save_file(weights, str(Path(scratch) / "model.safetensors"), metadata={"format": "pt"})
        torch.manual_seed(0)
        model, info = DeepseekV3ForCausalLM.from_pretrained(scratch, dtype=torch.float32, output_loading_info=True)
    problems = {key: value for key, value in info.items() if value}
    if problems:
        raise RuntimeError(f"transformers did not load every Kimi text weight: {problems}")
    return model.eval()


def target_features(model, token_ids: list[int], layer_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, concatenated residual stream after each of `layer_ids`) for one sequence, via forward hooks."""
    import torch

    captured: dict[int, torch.Tensor] = {}
    hooks = []
    for layer_id in layer_ids:

        def hook(_module, _inputs, output, layer_id=layer_id):  # type: ignore[no-untyped-def]
            captured[layer_id] = (output[0] if isinstance(output, tuple) else output)[0]

        hooks.append(model.model.layers[layer_id].register_forward_hook(hook))
    try:
        with torch.no_grad():
            logits = model(torch.tensor([token_ids])).logits[0]
    finally:
        for handle in hooks:
            handle.remove()
    return logits, torch.cat([captured[i] for i in layer_ids], dim=-1)


def feature_path(out_dir: Path, sample_id: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", sample_id)[:80]
    digest = hashlib.sha1(sample_id.encode("utf-8")).hexdigest()[:8]  # two ids that sanitise alike stay apart
    return Path(out_dir) / f"{safe}-{digest}{FEATURE_SUFFIX}"


def capture_features(
    records: Iterable[Mapping[str, Any]],
    target_dir: Path,
    layer_ids: tuple[int, ...],
    out_dir: Path,
    max_length: int,
    say: Callable[[str], None] = print,
) -> dict[str, int]:
    import torch

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    samples = [s for s in (sample_from_record(r, max_length) for r in records) if s is not None]
    todo = [s for s in samples if not feature_path(out_dir, s.id).exists()]
    counts = {"samples": len(samples), "already_captured": len(samples) - len(todo), "captured": 0, "tokens": 0}
    if not todo:
        return counts
    say(f"features: {len(todo)} of {len(samples)} conversations to capture (target layers {list(layer_ids)})")
    model = load_kimi_text_model(Path(target_dir))
    for index, sample in enumerate(todo, 1):
        _, hidden = target_features(model, sample.input_ids, list(layer_ids))
        document = {
            "input_ids": torch.tensor(sample.input_ids, dtype=torch.long),
            "loss_mask": torch.tensor(sample.loss_mask, dtype=torch.long),
            "hidden_states": hidden.float().contiguous(),
        }
        with replacing(feature_path(out_dir, sample.id)) as tmp:
            torch.save(document, tmp)
        counts["captured"] += 1
        counts["tokens"] += len(sample.input_ids)
        if index % 25 == 0 or index == len(todo):
            say(f"features: {counts['already_captured'] + index}/{len(samples)} captured")
    return counts


def feature_files(out_dir: Path) -> list[Path]:
    return sorted(Path(out_dir).glob(f"*{FEATURE_SUFFIX}"))
