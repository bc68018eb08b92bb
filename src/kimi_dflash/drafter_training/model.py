"""A trainable DFlash drafter in plain torch: the forward vLLM 0.32 serves, with SpecForge's DFlash objective; its
parameter names are vLLM's DFlash loader's, so the state dict is the export (docs/drafter-training.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

IGNORE = -100


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding of x [tokens, heads, head_dim] (vLLM's default for Qwen3)."""
    half = x.shape[-1] // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, 2 * half, 2, dtype=torch.float64) / (2 * half)))
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = torch.cos(angles).to(x.dtype)[:, None, :], torch.sin(angles).to(x.dtype)[:, None, :]
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, c: Mapping[str, Any]) -> None:
        super().__init__()
        hidden = int(c["hidden_size"])
        self.heads, self.kv_heads = int(c["num_attention_heads"]), int(c["num_key_value_heads"])
        self.head_dim, eps = int(c["head_dim"]), float(c["rms_norm_eps"])
        self.theta = float(c["rope_theta"])
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        self.q_norm = nn.RMSNorm(self.head_dim, eps)
        self.k_norm = nn.RMSNorm(self.head_dim, eps)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        query_positions: torch.Tensor,
        key_positions: torch.Tensor,
        allowed: torch.Tensor,
    ) -> torch.Tensor:
        def split(t: torch.Tensor, count: int) -> torch.Tensor:
            return t.view(t.shape[0], count, self.head_dim)

        q = rope(self.q_norm(split(self.q_proj(x), self.heads)), query_positions, self.theta)
        k = torch.cat([split(self.k_proj(context), self.kv_heads), split(self.k_proj(x), self.kv_heads)])
        k = rope(self.k_norm(k), key_positions, self.theta)
        v = torch.cat([split(self.v_proj(context), self.kv_heads), split(self.v_proj(x), self.kv_heads)])
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=allowed)
        return self.o_proj(out.transpose(0, 1).reshape(x.shape[0], -1))


class MLP(nn.Module):
    def __init__(self, c: Mapping[str, Any]) -> None:
        super().__init__()
        hidden, inter = int(c["hidden_size"]), int(c["intermediate_size"])
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c: Mapping[str, Any]) -> None:
        super().__init__()
        eps = float(c["rms_norm_eps"])
        self.input_layernorm = nn.RMSNorm(int(c["hidden_size"]), eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = nn.RMSNorm(int(c["hidden_size"]), eps)
        self.mlp = MLP(c)


class DFlashDrafter(nn.Module):
    def __init__(self, config: Mapping[str, Any], embed_tokens: torch.Tensor, lm_head: torch.Tensor) -> None:
        super().__init__()
        hidden, eps = int(config["hidden_size"]), float(config["rms_norm_eps"])
        self.block_size = int(config["block_size"])
        self.mask_token_id = int(config["dflash_config"]["mask_token_id"])
        self.fc = nn.Linear(hidden * len(config["dflash_config"]["target_layer_ids"]), hidden, bias=False)
        self.hidden_norm = nn.RMSNorm(hidden, eps)
        self.layers = nn.ModuleList(Layer(config) for _ in range(int(config["num_hidden_layers"])))
        self.norm = nn.RMSNorm(hidden, eps)
        # The target's, frozen, and not part of the drafter's checkpoint.
        self.register_buffer("embed_tokens", embed_tokens.detach().float(), persistent=False)
        self.register_buffer("lm_head", lm_head.detach().float(), persistent=False)

    def init_weights(self, seed: int, std: float = 0.02) -> None:
        """The untrained drafter: seeded normal linears, unit norms (what training starts from)."""
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                if name.endswith("norm.weight"):
                    parameter.fill_(1.0)
                else:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)

    def block_logits(self, features: torch.Tensor, input_ids: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        """Logits [anchors, B-1, vocab] of one block's mask slots per anchor; features [L, hidden * layers], ids [L]."""
        length, block = features.shape[0], self.block_size
        offsets = torch.arange(block)
        query_positions = (anchors[:, None] + offsets[None, :]).reshape(-1)
        query_ids = torch.full((anchors.numel(), block), self.mask_token_id, dtype=torch.long)
        query_ids[:, 0] = input_ids[anchors]
        key_positions = torch.cat([torch.arange(length), query_positions])
        # Block j sees context positions < anchor_j and every slot of its own block (non-causal).
        sees_context = torch.arange(length)[None, :] < anchors.repeat_interleave(block)[:, None]
        block_of = torch.arange(anchors.numel()).repeat_interleave(block)
        sees_block = block_of[:, None] == block_of[None, :]
        allowed = torch.cat([sees_context, sees_block], dim=1)

        context = self.hidden_norm(self.fc(features))
        residual = self.embed_tokens[query_ids.reshape(-1)]
        for layer in self.layers:
            x = layer.input_layernorm(residual)
            residual = residual + layer.self_attn(x, context, query_positions, key_positions, allowed)
            residual = residual + layer.mlp(layer.post_attention_layernorm(residual))
        out = self.norm(residual).view(anchors.numel(), block, -1)[:, 1:]
        return out @ self.lm_head.T


def block_targets(
    input_ids: torch.Tensor, loss_mask: torch.Tensor, anchors: torch.Tensor, block_size: int
) -> torch.Tensor:
    """Token each mask slot should propose ([anchors, B-1]); IGNORE past the end or outside the reply."""
    positions = anchors[:, None] + torch.arange(1, block_size)[None, :]
    inside = positions < input_ids.numel()
    clipped = positions.clamp(max=input_ids.numel() - 1)
    targets = input_ids[clipped].clone()
    targets[~inside | (loss_mask[clipped] == 0)] = IGNORE
    return targets


def candidate_anchors(loss_mask: torch.Tensor) -> torch.Tensor:
    """Positions that can anchor a block: a reply token with context before it and a reply token after it."""
    mask = loss_mask.bool()
    anchors = torch.nonzero(mask[:-1] & mask[1:]).flatten()
    return anchors[anchors >= 1]


def drafter_shapes(config: Mapping[str, Any]) -> dict[str, torch.Size]:
    """Every weight of the drafter (vLLM's loader's names and shapes), built on the meta device: no memory spent."""
    with torch.device("meta"):
        model = DFlashDrafter(config, torch.empty(0, 0), torch.empty(0, 0))
    return {name: value.shape for name, value in model.state_dict().items()}
