"""In-process check of target/drafter agreement, without vLLM: the target runs in transformers' own model class
(Qwen3 for the qwen3 demo, DeepSeek-V3 for the miniature Kimi's text model), the drafter through a plain-torch
forward that follows vLLM 0.32's DFlash semantics step by step.

Used by the tests and by `python -m kimi_dflash_lab demo-reference` to document the acceptance the demo shows.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kimi_dflash.core.options import declare, option, run
from kimi_dflash.drafter_training.features import load_kimi_text_model, target_features

if TYPE_CHECKING:
    import torch

    from kimi_dflash.demo.walk import Walk

DEFAULT_PROMPTS = (
    "Tell me about the harbor.",
    "What does a lighthouse keeper do in winter?",
    "Describe the market on Saturday morning.",
)


def load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    import torch

    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    theta: float,
    rope_scaling: dict[str, object] | None = None,
    amplitude: float = 1.0,
) -> torch.Tensor:
    """Neox-style rotary embedding over the last dim of x [tokens, heads, head_dim]. With YaRN `rope_scaling` the
    pair frequencies are YaRN's, and vLLM multiplies its cos/sin cache by an amplitude (which one depends on the
    release and the rope fields: kimi_dflash.rules.rope_amplitude); the caller says which."""
    import torch

    from kimi_dflash_lab.yarn_drafter import yarn_frequencies

    head_dim = x.shape[-1]
    if rope_scaling is not None and rope_scaling.get("rope_type", rope_scaling.get("type")) == "yarn":
        inv_freq = torch.from_numpy(yarn_frequencies(head_dim, theta, rope_scaling))
    else:
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos = (torch.cos(angles) * amplitude).to(x.dtype)[:, None, :]
    sin = (torch.sin(angles) * amplitude).to(x.dtype)[:, None, :]
    first, second = x[..., : head_dim // 2], x[..., head_dim // 2 :]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


@dataclass
class DrafterReference:
    """The drafter's forward pass, written from vLLM's DFlashQwen3Model (not copied)."""

    weights: dict[str, torch.Tensor]
    config: dict[str, object]
    embed_tokens: torch.Tensor  # shared with the target
    lm_head: torch.Tensor  # shared with the target
    rope_amplitude: float = 1.0  # what vLLM scales the drafter's cos/sin cache by (1.0 without YaRN)

    @classmethod
    def load(cls, drafter_dir: Path, target_dir: Path) -> DrafterReference:
        target = load_safetensors(target_dir / "model.safetensors")
        return cls(
            weights=load_safetensors(drafter_dir / "model.safetensors"),
            config=json.loads((drafter_dir / "config.json").read_text()),
            embed_tokens=target["model.embed_tokens.weight"],
            lm_head=target["lm_head.weight"],
        )

    @classmethod
    def for_model(cls, drafter_dir: Path, model) -> DrafterReference:  # type: ignore[no-untyped-def]
        """The drafter sharing a loaded transformers target's embeddings and lm_head (float32 throughout)."""
        return cls(
            weights={
                name: value.float() for name, value in load_safetensors(drafter_dir / "model.safetensors").items()
            },
            config=json.loads((drafter_dir / "config.json").read_text()),
            embed_tokens=model.get_input_embeddings().weight.detach().float(),
            lm_head=model.lm_head.weight.detach().float(),
        )

    def _w(self, name: str) -> torch.Tensor:
        return self.weights[name]

    def propose(self, context_features: torch.Tensor, bonus_token: int, num_speculative_tokens: int) -> list[int]:
        """Draft tokens for one request.

        context_features: [n, hidden * len(target_layer_ids)], the target's residual stream after each
        target layer id, for positions 0..n-1. The bonus token sits at position n, masks after it."""
        import torch

        cfg = self.config
        eps = float(cfg["rms_norm_eps"])  # type: ignore[arg-type]
        theta = float(cfg["rope_theta"])  # type: ignore[arg-type]
        head_dim = int(cfg["head_dim"])  # type: ignore[call-overload]
        heads = int(cfg["num_attention_heads"])  # type: ignore[call-overload]
        kv_heads = int(cfg["num_key_value_heads"])  # type: ignore[call-overload]
        mask_id = int(cfg["dflash_config"]["mask_token_id"])  # type: ignore[index]
        n = context_features.shape[0]

        context = rms_norm(context_features @ self._w("fc.weight").T, self._w("hidden_norm.weight"), eps)
        context_positions = torch.arange(n)
        query_ids = torch.tensor([bonus_token] + [mask_id] * num_speculative_tokens)
        query_positions = torch.arange(n, n + 1 + num_speculative_tokens)
        all_positions = torch.cat([context_positions, query_positions])

        residual = self.embed_tokens[query_ids]
        hidden = torch.zeros_like(residual)
        for layer in range(int(cfg["num_hidden_layers"])):  # type: ignore[call-overload]
            p = f"layers.{layer}"
            residual = residual + hidden
            x = rms_norm(residual, self._w(f"{p}.input_layernorm.weight"), eps)

            def heads_of(t: torch.Tensor, count: int) -> torch.Tensor:
                return t.view(t.shape[0], count, head_dim)

            q = heads_of(x @ self._w(f"{p}.self_attn.q_proj.weight").T, heads)
            k = heads_of(x @ self._w(f"{p}.self_attn.k_proj.weight").T, kv_heads)
            v = heads_of(x @ self._w(f"{p}.self_attn.v_proj.weight").T, kv_heads)
            # Context K/V: projected from the normed context features directly (no input_layernorm).
            ck = heads_of(context @ self._w(f"{p}.self_attn.k_proj.weight").T, kv_heads)
            cv = heads_of(context @ self._w(f"{p}.self_attn.v_proj.weight").T, kv_heads)
            rope = {"rope_scaling": cfg.get("rope_scaling"), "amplitude": self.rope_amplitude}
            q = rms_norm(q, self._w(f"{p}.self_attn.q_norm.weight"), eps)
            q = apply_rope(q, query_positions, theta, **rope)  # type: ignore[arg-type]
            k = rms_norm(torch.cat([ck, k]), self._w(f"{p}.self_attn.k_norm.weight"), eps)
            k = apply_rope(k, all_positions, theta, **rope)  # type: ignore[arg-type]
            v = torch.cat([cv, v])
            group = heads // kv_heads
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
            # Non-causal: every query sees all context positions and the whole block.
            scores = torch.einsum("qhd,khd->hqk", q, k) * head_dim**-0.5
            attended = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v).reshape(len(query_ids), -1)
            residual = residual + attended @ self._w(f"{p}.self_attn.o_proj.weight").T
            x = rms_norm(residual, self._w(f"{p}.post_attention_layernorm.weight"), eps)
            gate = x @ self._w(f"{p}.mlp.gate_proj.weight").T
            up = x @ self._w(f"{p}.mlp.up_proj.weight").T
            hidden = (torch.nn.functional.silu(gate) * up) @ self._w(f"{p}.mlp.down_proj.weight").T
        out = rms_norm(residual + hidden, self._w("norm.weight"), eps)
        logits = out[1:] @ self.lm_head.T
        return [int(t) for t in logits.argmax(dim=-1)]


def next_token(walk: Walk, token_id: int) -> int:
    """The construction's account of the target: the greedy successor of an ordinary token."""
    return walk.cycle[(int(walk.phase[token_id]) + 1) % walk.length]


def draft_is_right(walk: Walk, anchor_token: int, slot: int) -> bool:
    """The construction's account of the drafter: whether its proposal for mask slot `slot` (1-based) after
    `anchor_token` is the target's (it misses exactly on the walk's seeded missed phases)."""
    residual_phase = (int(walk.phase[anchor_token]) + slot - 1) % walk.length
    return residual_phase not in set(walk.missed_phases.tolist())


@dataclass(frozen=True)
class AgreementReport:
    prompt_tokens: int
    generated: list[int]  # greedy target continuation (token ids)
    slot_right: list[list[bool]]  # per anchor: whether each draft slot equals the target's token
    accepted_per_position: list[float]  # share of anchors whose first k drafts are all right

    @property
    def mean_accepted(self) -> float:
        """Average number of drafts accepted per step (prefix rule), as vLLM counts them."""
        return sum(self.accepted_per_position)


def measure_agreement(
    target_dir: Path,
    drafter_dir: Path,
    prompt_ids: list[int],
    max_new_tokens: int,
    num_speculative_tokens: int,
    model=None,
) -> AgreementReport:  # type: ignore[no-untyped-def]
    """Greedy-decode the target, then draft from every generated token and compare with what followed."""

    if model is None:
        model = load_target(target_dir)
    drafter = DrafterReference.for_model(drafter_dir, model)
    layer_ids = list(drafter.config["dflash_config"]["target_layer_ids"])  # type: ignore[index]
    tokens = greedy_generate(model, list(prompt_ids), max_new_tokens + num_speculative_tokens)
    _, features = target_features(model, tokens, layer_ids)
    start = len(prompt_ids)
    slot_right: list[list[bool]] = []
    for anchor in range(start, start + max_new_tokens):
        drafts = drafter.propose(features[:anchor], tokens[anchor], num_speculative_tokens)
        truth = tokens[anchor + 1 : anchor + 1 + num_speculative_tokens]
        slot_right.append([d == t for d, t in zip(drafts, truth, strict=True)])
    accepted = []
    for k in range(1, num_speculative_tokens + 1):
        accepted.append(sum(all(row[:k]) for row in slot_right) / len(slot_right))
    return AgreementReport(start, tokens[start : start + max_new_tokens], slot_right, accepted)


def agreement_by_prompt(models, prompts, max_new_tokens: int, num_speculative_tokens: int, model):  # type: ignore[no-untyped-def]
    """measure_agreement for each chat prompt on one loaded target (a DemoModels bundle's target and drafter)."""
    return {
        prompt: measure_agreement(
            models.target_dir,
            models.drafter_dir,
            chat_prompt_ids(models.target_dir, prompt),
            max_new_tokens,
            num_speculative_tokens,
            model=model,
        )
        for prompt in prompts
    }


def greedy_generate(model, prompt_ids: list[int], new_tokens: int) -> list[int]:  # type: ignore[no-untyped-def]
    """Prompt + `new_tokens` greedy tokens (transformers' generate, KV cache, no early stop at EOS)."""
    import torch

    with torch.no_grad():
        output = model.generate(
            torch.tensor([prompt_ids]), max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False
        )
    return [int(t) for t in output[0]]


def load_target(target_dir: Path):  # type: ignore[no-untyped-def]
    import torch
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()


def chat_prompt_ids(target_dir: Path, text: str) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    return list(
        tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
    )


TARGET_LOADERS = {"qwen3": load_target, "kimi": load_kimi_text_model, "kimi-cuda": load_kimi_text_model}


@dataclass(kw_only=True)
class ReferenceOptions:
    root: Path | None = option("demo model root (default: project cache)")
    model: str = option("which demo (default kimi)", choices=sorted(TARGET_LOADERS), default="kimi")
    tokens: int = option("generated tokens per prompt (default 128)", default=128)
    num_speculative_tokens: int = option("draft slots (default 8)", flag=("-k", "--num-speculative-tokens"), default=8)
    prompts: list[str] = option("user messages", positional=True, default=list(DEFAULT_PROMPTS))


add_cli_args = declare(
    ReferenceOptions,
    "Measure, without vLLM, how often the demo drafter's proposals equal the target's greedy tokens (per draft "
    "position, prefix rule as vLLM counts acceptance).",
)


def main(args: ReferenceOptions) -> int:
    from kimi_dflash.demo.bundle import ensure_demo_models

    models = ensure_demo_models(args.root, choice=args.model)
    model = TARGET_LOADERS[args.model](models.target_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(models.target_dir))
    totals = [0.0] * args.num_speculative_tokens
    for prompt, report in agreement_by_prompt(
        models, args.prompts, args.tokens, args.num_speculative_tokens, model
    ).items():
        print(f"prompt: {prompt!r}\n  output: {tokenizer.decode(report.generated[:40])!r}...")
        print("  accepted per position: " + " ".join(f"{a:.2f}" for a in report.accepted_per_position))
        totals = [t + a for t, a in zip(totals, report.accepted_per_position, strict=True)]
    mean = [t / len(args.prompts) for t in totals]
    print("mean accepted per position: " + " ".join(f"{a:.2f}" for a in mean))
    print(f"mean accepted drafts per step (k={args.num_speculative_tokens}): {sum(mean):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab demo-reference"))
