"""Fabricate a tiny DeepSeek-V3-architecture (MLA) checkpoint on disk, with no model hub.

Kimi K2.6 is a DeepSeek-V3 model, so its attention is MLA: every layer caches one latent row
(kv_lora_rank + qk_rope_head_dim values) per token. vLLM's CPU MLA decode kernel only compiles for a
576-wide latent (512 + 64), so those two sizes are kept at Kimi's values; everything else is shrunk
until the model loads in seconds. Weights are random (seeded), which is enough to exercise the KV
write path and to compare outputs between KV-cache settings token by token.

``latent_gain`` multiplies the ``kv_a_layernorm`` weights and divides ``kv_b_proj``: the model computes
the same function, but the latent vectors that land in the KV cache are ``latent_gain`` times larger.
A gain that pushes the latent amax past the FP8 maximum (448) reproduces, in miniature, what an
unscaled (k_scale = 1.0) FP8 cache does to a checkpoint whose latents do not fit the FP8 range.

Usage: python -m kimi_dflash_lab.studies.tiny_mla OUT_DIR [--layers N] [--latent-gain G] [--seed S]
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kimi_dflash.core.atomic_write import publish_directory
from kimi_dflash.core.options import declare, option, run

# Kept at Kimi K2.6's sizes: the CPU MLA decode kernel is compiled for head_dim 576 only.
KV_LORA_RANK = 512
QK_ROPE_HEAD_DIM = 64

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Bump when the fabrication changes, so cached copies are rebuilt (ensure_tiny_mla_model).
FABRICATION_VERSION = 2
SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]


def _training_text() -> list[str]:
    """Local text to train the byte-level BPE on: the shipped calibration and math prompts."""
    data = resources.files("kimi_dflash").joinpath("data")
    lines: list[str] = []
    for name in ("kv_calibration_prompts.jsonl", "math_word_problems.jsonl"):
        for line in data.joinpath(name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                lines.append(record.get("prompt") or record.get("question", ""))
    return lines


def _build_tokenizer(out_dir: Path, vocab_size: int) -> int:
    """Train a byte-level BPE tokenizer, save it as a Hugging Face fast tokenizer; return its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|eos|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return len(fast)


def fabricate_tiny_mla_model(
    out_dir: Path,
    *,
    num_layers: int = 2,
    hidden_size: int = 256,
    num_heads: int = 4,
    latent_gain: float = 1.0,
    seed: int = 0,
    vocab_size: int = 1024,
) -> Path:
    """Write a tiny DeepseekV3ForCausalLM checkpoint + tokenizer to ``out_dir`` (atomically) and return it.

    All layers are dense (no MoE) so the CPU build runs it quickly; the attention is real MLA with
    Kimi's latent sizes. Re-running with the same arguments produces identical weights.
    """
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        real_vocab = _build_tokenizer(staging, vocab_size)
        config = DeepseekV3Config(
            vocab_size=real_vocab,
            hidden_size=hidden_size,
            intermediate_size=hidden_size * 2,
            moe_intermediate_size=hidden_size // 2,
            num_hidden_layers=num_layers,
            first_k_dense_replace=num_layers,  # every layer dense: no MoE kernels needed
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_group=1,
            topk_group=1,
            num_attention_heads=num_heads,
            num_key_value_heads=num_heads,
            q_lora_rank=hidden_size // 2,
            kv_lora_rank=KV_LORA_RANK,
            qk_nope_head_dim=32,
            qk_rope_head_dim=QK_ROPE_HEAD_DIM,
            v_head_dim=32,
            num_nextn_predict_layers=0,
            max_position_embeddings=4096,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
            tie_word_embeddings=False,
            torch_dtype="bfloat16",
        )
        config.architectures = ["DeepseekV3ForCausalLM"]
        torch.manual_seed(seed)
        model = DeepseekV3ForCausalLM(config)
        # Random init leaves the residual stream tiny; scale embeddings up so that token choice
        # actually depends on attention (otherwise every prompt decodes the same token forever).
        with torch.no_grad():
            model.model.embed_tokens.weight.normal_(0.0, 1.0)
            for layer in model.model.layers:
                # Let attention move the residual stream as much as the embedding does, so that what the
                # KV cache returns decides the next token (with std 0.02 the model is a bigram table).
                o_proj = layer.self_attn.o_proj.weight
                o_proj.normal_(0.0, 4.0 / o_proj.shape[1] ** 0.5)
                # Scale what is cached, and undo it where the latent is consumed (kv_b_proj, which vLLM
                # absorbs into W_UK / W_UV): in BF16 the model computes the same function for any gain;
                # only the magnitude stored in the KV cache changes.
                layer.self_attn.kv_a_layernorm.weight.fill_(latent_gain)
                layer.self_attn.kv_b_proj.weight.div_(latent_gain)
        model = model.to(torch.bfloat16)
        model.save_pretrained(staging, safe_serialization=True)
        meta = {
            "fabricated_by": "kimi_dflash_lab.studies.tiny_mla",
            "version": FABRICATION_VERSION,
            "seed": seed,
            "latent_gain": latent_gain,
            "num_layers": num_layers,
        }
        (staging / "fabrication.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        _publish(staging, out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def _publish(staging: Path, out_dir: Path) -> None:
    """Swap a finished build into place, so a reader never sees a half-written checkpoint."""
    publish_directory(staging, out_dir)


def ensure_tiny_mla_model(out_dir: Path, *, latent_gain: float, num_layers: int = 2, seed: int = 0) -> Path:
    """Reuse ``out_dir`` if it holds this exact fabrication, otherwise (re)build it."""
    try:
        meta = json.loads((Path(out_dir) / "fabrication.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        meta = {}
    wanted = {"version": FABRICATION_VERSION, "seed": seed, "latent_gain": latent_gain, "num_layers": num_layers}
    if all(meta.get(key) == value for key, value in wanted.items()):
        return Path(out_dir)
    return fabricate_tiny_mla_model(out_dir, latent_gain=latent_gain, num_layers=num_layers, seed=seed)


@dataclass(kw_only=True)
class TinyMlaOptions:
    out_dir: Path = option("directory to write (replaced if it exists)", positional=True, required=True)
    layers: int = option("decoder layers (default 2)", default=2)
    latent_gain: float = option("multiplier on kv_a_layernorm weights = size of cached latents (default 1.0)",
        default=1.0)  # fmt: skip
    seed: int = option("weight seed (default 0)", default=0)


add_cli_args = declare(
    TinyMlaOptions, "Fabricate a tiny DeepSeek-V3 (MLA) model with random weights for CPU tests of the KV path."
)


def main(args: TinyMlaOptions) -> int:
    path = fabricate_tiny_mla_model(args.out_dir, num_layers=args.layers, latent_gain=args.latent_gain, seed=args.seed)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab.studies.tiny_mla"))
