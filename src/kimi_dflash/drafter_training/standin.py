"""The demo's CPU trainer, standing in for `specforge train` (docs/drafter-training.md); resumable, and a resumed
run ends with the same weights as an uninterrupted one (all randomness derives from seed and epoch or step)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from kimi_dflash.core.atomic_write import replacing, write_json_atomic
from kimi_dflash.drafter_training.model import DFlashDrafter, block_targets, candidate_anchors

CHECKPOINT = "checkpoint.pt"
LOG = "train-log.json"


@dataclass(frozen=True)
class TrainSettings:
    epochs: int
    learning_rate: float
    anchors_per_sequence: int = 32
    warmup_ratio: float = 0.04
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    seed: int = 0
    save_every: int = 50
    log_every: int = 25
    stop_after_steps: int | None = None  # end early (checkpoint written): for tests and time budgets


def learning_rate(step: int, total: int, settings: TrainSettings) -> float:
    """Linear warm-up then cosine decay to zero (SpecForge's default schedule shape)."""
    warmup = max(1, int(total * settings.warmup_ratio))
    if step < warmup:
        return settings.learning_rate * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return settings.learning_rate * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def epoch_order(count: int, seed: int, epoch: int) -> list[int]:
    return torch.randperm(count, generator=torch.Generator().manual_seed(seed * 1000 + epoch)).tolist()


def pick_anchors(sample: dict[str, torch.Tensor], count: int, seed: int, step: int) -> torch.Tensor:
    candidates = candidate_anchors(sample["loss_mask"])
    if candidates.numel() <= count:
        return candidates
    chosen = torch.randperm(candidates.numel(), generator=torch.Generator().manual_seed(seed * 7919 + step))
    return candidates[chosen[:count].sort().values]


def step_loss(
    model: DFlashDrafter, sample: dict[str, torch.Tensor], anchors: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, right [B-1], counted [B-1]): mean cross-entropy over scored slots, and per-slot top-1 hits."""
    logits = model.block_logits(sample["hidden_states"].float(), sample["input_ids"], anchors)
    targets = block_targets(sample["input_ids"], sample["loss_mask"], anchors, model.block_size)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
    scored = targets != -100
    right = ((logits.argmax(-1) == targets) & scored).sum(0)
    return loss, right, scored.sum(0)


def train(
    model: DFlashDrafter, files: list[Path], out_dir: Path, settings: TrainSettings, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Train (or resume) to `settings.epochs` epochs; returns the run's summary (also in `<out>/train-log.json`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    features = [torch.load(path, map_location="cpu", weights_only=True) for path in files]
    samples = [s for s in features if candidate_anchors(s["loss_mask"]).numel()]
    if not samples:
        why = "regenerate with longer replies (each needs two reply tokens)"
        raise ValueError(f"no trainable samples among {len(files)} feature files: {why}")
    total_steps = settings.epochs * len(samples)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    step, history = 0, []
    checkpoint = out_dir / CHECKPOINT
    if checkpoint.exists():
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        if state["total_steps"] != total_steps or state["settings"]["seed"] != settings.seed:
            other = f"{state['total_steps']} steps, seed {state['settings']['seed']}"
            this = f"this one: {total_steps}, seed {settings.seed}"
            raise ValueError(f"{checkpoint} belongs to another run ({other}; {this}): move it or train elsewhere")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, history = int(state["step"]), list(state["history"])
        say(f"train: resuming from {checkpoint} at step {step}/{total_steps}")

    def save() -> None:
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,
            "total_steps": total_steps,
            "settings": asdict(settings),
            "history": history,
        }
        with replacing(checkpoint) as tmp:
            torch.save(state, tmp)

    steps = f"{len(samples)} sequences x {settings.epochs} epochs"
    parameters = sum(p.numel() for p in model.parameters())
    say(f"train: {steps} = {total_steps} steps, {parameters:,} trainable parameters, lr {settings.learning_rate}")
    started, first_step = time.monotonic(), step
    window_loss, window_right, window_counted = 0.0, 0, 0
    model.train()
    while step < total_steps:
        epoch, index = divmod(step, len(samples))
        sample = samples[epoch_order(len(samples), settings.seed, epoch)[index]]
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, total_steps, settings)
        anchors = pick_anchors(sample, settings.anchors_per_sequence, settings.seed, step)
        loss, right, counted = step_loss(model, sample, anchors)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        optimizer.step()
        step += 1
        window_loss += float(loss.detach())
        window_right, window_counted = window_right + right, window_counted + counted
        if step % settings.log_every == 0 or step == total_steps:
            accuracy = (window_right / window_counted.clamp(min=1)).tolist()
            entry = {
                "step": step,
                "epoch": epoch + 1,
                "loss": window_loss / settings.log_every,
                "slot_accuracy": [round(a, 4) for a in accuracy],
            }
            history.append(entry)
            rate = (step - first_step) / max(time.monotonic() - started, 1e-9)
            eta = (total_steps - step) / rate if rate else 0.0
            say(
                f"train: step {step}/{total_steps} (epoch {epoch + 1}) loss {entry['loss']:.3f}, top-1 slots 1-4 "
                f"{', '.join(f'{a:.2f}' for a in accuracy[:4])}, {rate:.1f} steps/s, ETA {eta:.0f} s"
            )
            window_loss, window_right, window_counted = 0.0, 0, 0
        if step % settings.save_every == 0 or step == total_steps:
            save()
        if settings.stop_after_steps is not None and step >= settings.stop_after_steps and step < total_steps:
            save()
            say(f"train: stopped at step {step} as asked; rerun to resume")
            break
    summary = {
        "steps": step,
        "total_steps": total_steps,
        "sequences": len(samples),
        "complete": step >= total_steps,
        "history": history,
    }
    write_json_atomic(out_dir / LOG, summary)
    return summary
