"""The patches the recipe needs to run DFlash next to an MLA target on ROCm, per vLLM version.

Every patch says what it fixes, which upstream change retires it, how to recognise that change
(a feature probe), the exact old-shape anchors it edits and what replaces them. The anchors were
read from the vLLM wheels on PyPI (0.20.0 - 0.33.0); `upstream_since` records where each fix first
appears, for the docs only: the patcher itself never looks at version strings.

Patched code is self-contained (it never imports kimi_dflash), so a patched image keeps working
if this package is removed. Every inserted block carries a `kimi-dflash(<patch id>)` comment.
"""

from __future__ import annotations

from collections.abc import Iterable

from kimi_dflash.patcher import floor
from kimi_dflash.patcher.model import Edit, Need, Patch, Probe

SELECTOR = "v1/attention/selector.py"
ATTENTION_CONFIG = "config/attention.py"
DFLASH = "v1/spec_decode/dflash.py"
TRITON_KERNEL = "v1/attention/ops/triton_unified_attention.py"
TRITON_BACKEND = "v1/attention/backends/triton_attn.py"
ATTENTION_LAYER = "model_executor/layers/attention/attention.py"
AITER_FA = "v1/attention/backends/rocm_aiter_fa.py"

AITER_FA_NONCAUSAL = Patch(
    id="aiter-fa-noncausal",
    title="AITER flash-attention backend accepts non-causal (DFlash) blocks",
    why=(
        "The DFlash drafter attends bidirectionally within its draft block. On ROCm the "
        "ROCM_AITER_FA backend refused non-causal attention before DFlash's ROCm support landed."
    ),
    upstream_pr="#39703",
    upstream_since="0.20.0",
    retired_when=(
        Probe(
            AITER_FA,
            r"def supports_non_causal\(cls\) -> bool:\s*\n\s*return True",
            "ROCM_AITER_FA declares supports_non_causal() -> True",
        ),
    ),
    edits=(),
    needed_when=Need("the DFlash drafter runs on ROCM_AITER_FA", ("dflash", "drafter on ROCM_AITER_FA")),
    no_edit_reason=(
        "no source patch is carried for builds older than vLLM 0.20.0: PyPI's 0.19.x wheels have "
        "no DFlash proposer at all, and the 0.19.2 nightlies the recipe started from cannot be "
        "fetched to write anchors against. Use vLLM >= 0.20.0."
    ),
)

TARGET_MLA_CAUSAL = Patch(
    id="target-mla-causal",
    title="target MLA layers are not forced non-causal when the method is dflash",
    why=(
        "The 0.20 selector sets use_non_causal for every attention layer when "
        "speculative_config.method == 'dflash', including the target's MLA layers. No MLA backend "
        "supports non-causal attention, so start-up fails with 'No valid attention backend found'. "
        "Only the (non-MLA) drafter needs non-causal attention."
    ),
    upstream_pr="#39930",
    upstream_since="0.21.0",
    retired_when=(
        Probe(
            ATTENTION_CONFIG,
            r"^\s+use_non_causal: bool\b",
            "AttentionConfig has a use_non_causal field (set only in the drafter's config)",
        ),
        Probe(
            SELECTOR,
            r"attention_config\.use_non_causal",
            "the selector takes use_non_causal from the model's own attention config",
        ),
    ),
    edits=(
        Edit(
            SELECTOR,
            old=(
                "    speculative_config = vllm_config.speculative_config\n"
                "    use_non_causal = (\n"
                '        speculative_config is not None and speculative_config.method == "dflash"\n'
                "    )\n"
            ),
            new=(
                "    speculative_config = vllm_config.speculative_config\n"
                "    # kimi-dflash(target-mla-causal): only the DFlash drafter runs non-causal.\n"
                "    # MLA layers belong to the target, which is always causal; asking for\n"
                "    # non-causal there leaves no valid MLA backend.\n"
                "    use_non_causal = (\n"
                "        speculative_config is not None\n"
                '        and speculative_config.method == "dflash"\n'
                "        and not use_mla\n"
                "    )\n"
            ),
        ),
    ),
    runtime="target-mla-causal",
    runtime_hooks=(
        Probe(
            SELECTOR,
            r"^def _cached_get_attn_backend\(",
            "module-level _cached_get_attn_backend() in the selector",
        ),
        Probe(
            SELECTOR,
            r"attn_selector_config=attn_selector_config",
            "get_attn_backend() hands its AttentionSelectorConfig to _cached_get_attn_backend()",
        ),
    ),
    needed_when=Need(
        "the target is MLA (Kimi K2.x, DeepSeek-V3) and the speculative method is dflash", ("dflash", "mla target")
    ),
)

DFLASH_ASSERT_GATE = Patch(
    id="dflash-assert-gate",
    title="DFlash metadata check made conditional (per layer, per backend)",
    why=(
        "DFlashProposer asserts that every drafter layer's attention metadata has a `causal` "
        "attribute equal to False. Metadata classes without that field (TRITON_ATTN before 0.24) "
        "fail it even when the layer's backend handles non-causal blocks, and `python -O` would "
        "silently drop the assert. The patch accepts metadata with causal=False, or a backend that "
        "declares supports_non_causal() when the metadata has no causal field, and raises a clear "
        "error otherwise."
    ),
    upstream_pr="#43445",
    upstream_since="0.23.0",
    retired_when=(
        Probe(
            DFLASH,
            r"if not self\.dflash_causal:",
            "the DFlash metadata check only runs when the drafter needs non-causal attention",
        ),
    ),
    edits=(
        Edit(
            DFLASH,
            old=(
                "        for layer_name, attn_metadata in per_layer.items():\n"
                '            assert getattr(attn_metadata, "causal", None) is False, (\n'
                '                f"Attention metadata for layer {layer_name} does not have"\n'
                '                " non-causal support, which is required for DFlash."\n'
                '                " Consider using a different attention backend, such as FlashAttention."\n'
                "            )\n"
                "        return per_group, per_layer\n"
            ),
            new=(
                "        # kimi-dflash(dflash-assert-gate): judge each drafter layer by its metadata's\n"
                "        # causal flag, or by its backend when the metadata has no such flag.\n"
                "        backends = {\n"
                "            name: group.backend\n"
                "            for group in self.draft_attn_groups\n"
                "            for name in group.layer_names\n"
                "        }\n"
                "        for layer_name, attn_metadata in per_layer.items():\n"
                '            causal = getattr(attn_metadata, "causal", None)\n'
                "            if causal is False:\n"
                "                continue\n"
                "            backend = backends.get(layer_name)\n"
                "            if causal is None and backend is not None:\n"
                "                if backend.supports_non_causal():\n"
                "                    continue\n"
                '            backend_name = backend.get_name() if backend else "unknown"\n'
                "            raise RuntimeError(\n"
                '                f"DFlash drafter layer {layer_name} runs on {backend_name}, which"\n'
                '                " builds causal attention metadata; DFlash needs non-causal"\n'
                '                " attention. Use a non-causal backend for the drafter (ROCM_ATTN,"\n'
                '                " ROCM_AITER_FA, FLASH_ATTN, or TRITON_ATTN with the kimi-dflash"\n'
                '                " patch triton-noncausal)."\n'
                "            )\n"
                "        return per_group, per_layer\n"
            ),
        ),
    ),
    runtime="dflash-assert-gate",
    runtime_hooks=(
        Probe(DFLASH, r"^class DFlashProposer\(", "class DFlashProposer"),
        Probe(
            DFLASH,
            r"def build_per_group_and_layer_attn_metadata\(",
            "DFlashProposer.build_per_group_and_layer_attn_metadata()",
        ),
    ),
    needed_when=Need(
        "the DFlash drafter's backend builds metadata without a `causal` field (TRITON_ATTN before "
        "0.24; ROCm's default ROCM_ATTN has one)",
        ("dflash", "drafter metadata without causal"),
    ),
)

TRITON_NONCAUSAL = Patch(
    id="triton-noncausal",
    title="Triton unified attention accepts non-causal blocks",
    why=(
        "TRITON_ATTN hard-codes causal=True and its kernel wrapper asserts 'Only causal attention "
        "is supported', so a DFlash drafter cannot run on it. The patch adds an IS_CAUSAL "
        "constexpr to the kernel (non-causal: every query of a block sees every key of its "
        "sequence), passes the block's causality from the metadata, and declares "
        "supports_non_causal()."
    ),
    upstream_pr="not identified",
    upstream_since="0.24.0",
    retired_when=(
        Probe(
            TRITON_KERNEL,
            r"USE_CAUSAL: tl\.constexpr",
            "the unified Triton kernel has a USE_CAUSAL constexpr",
        ),
        Probe(
            TRITON_BACKEND,
            r"def supports_non_causal\(cls\)",
            "TRITON_ATTN declares supports_non_causal()",
        ),
    ),
    edits=(
        Edit(
            TRITON_KERNEL,
            old="    CHUNK_SIZE: tl.constexpr = -1,\n",
            new=(
                "    CHUNK_SIZE: tl.constexpr = -1,\n"
                "    # kimi-dflash(triton-noncausal): False lets every query token of a block\n"
                "    # see all keys of its sequence (DFlash drafts a whole block at once).\n"
                "    IS_CAUSAL: tl.constexpr = True,\n"
            ),
        ),
        Edit(
            TRITON_KERNEL,
            old=(
                "        CHUNK_SIZE,\n    )\n\n    # iterate through tiles (now limited to the sliding window range)\n"
            ),
            new=(
                "        CHUNK_SIZE,\n"
                "    )\n"
                "    if not IS_CAUSAL:\n"
                "        # kimi-dflash(triton-noncausal): read every tile of the sequence.\n"
                "        max_seq_prefix_len = seq_len\n"
                "        loop_hi = cdiv_fn(seq_len, TILE_SIZE)\n"
                "        if IS_3D:\n"
                "            loop_hi = tl.minimum((segm_idx + 1) * tiles_per_segment, loop_hi)\n"
                "\n"
                "    # iterate through tiles (now limited to the sliding window range)\n"
            ),
        ),
        Edit(
            TRITON_KERNEL,
            old=("            CHUNK_SIZE,\n        )\n\n        # S : (BLOCK_M, TILE_SIZE)\n"),
            new=(
                "            CHUNK_SIZE,\n"
                "        )\n"
                "        if not IS_CAUSAL:\n"
                "            # kimi-dflash(triton-noncausal): a key is visible iff it exists.\n"
                "            seq_mask = (seq_offset[None, :] < seq_len) & (query_abs_pos >= 0)\n"
                "\n"
                "        # S : (BLOCK_M, TILE_SIZE)\n"
            ),
        ),
        Edit(
            TRITON_KERNEL,
            old='    assert causal, "Only causal attention is supported"\n',
            new=(
                "    # kimi-dflash(triton-noncausal): non-causal blocks are supported for plain\n"
                "    # full attention; refuse the masks the non-causal path does not implement.\n"
                "    if not causal:\n"
                "        unsupported = [\n"
                "            name\n"
                "            for name, used in (\n"
                '                ("sliding window", window_size[0] >= 0),\n'
                '                ("chunked attention", chunk_lookback > -1),\n'
                '                ("multimodal prefix ranges", mm_prefix_range is not None),\n'
                '                ("qq_bias", qq_bias is not None),\n'
                "            )\n"
                "            if used\n"
                "        ]\n"
                "        if unsupported:\n"
                "            raise ValueError(\n"
                '                "non-causal Triton unified attention (kimi-dflash patch "\n'
                "                f\"triton-noncausal) does not support: {', '.join(unsupported)}\"\n"
                "            )\n"
            ),
        ),
        Edit(
            TRITON_KERNEL,
            old="        CHUNK_SIZE=chunk_size,\n",
            new=("        CHUNK_SIZE=chunk_size,\n        IS_CAUSAL=bool(causal),  # kimi-dflash(triton-noncausal)\n"),
        ),
        Edit(
            TRITON_BACKEND,
            old="    mm_prefix_range_tensor: torch.Tensor | None = None\n",
            new=(
                "    mm_prefix_range_tensor: torch.Tensor | None = None\n"
                "    # kimi-dflash(triton-noncausal): False for a DFlash drafter block.\n"
                "    causal: bool = True\n"
            ),
        ),
        Edit(
            TRITON_BACKEND,
            old=(
                "            softmax_segm_expsum=self.softmax_segm_expsum,\n        )\n        return attn_metadata\n"
            ),
            new=(
                "            softmax_segm_expsum=self.softmax_segm_expsum,\n"
                "        )\n"
                "        # kimi-dflash(triton-noncausal): carry the block's causality to forward().\n"
                "        attn_metadata.causal = common_attn_metadata.causal\n"
                "        return attn_metadata\n"
            ),
        ),
        Edit(
            TRITON_BACKEND,
            old=('    @staticmethod\n    def get_name() -> str:\n        return "TRITON_ATTN"\n'),
            new=(
                "    @staticmethod\n"
                "    def get_name() -> str:\n"
                '        return "TRITON_ATTN"\n'
                "\n"
                "    # kimi-dflash(triton-noncausal): the patched kernel honours causal=False.\n"
                "    @classmethod\n"
                "    def supports_non_causal(cls) -> bool:\n"
                "        return True\n"
            ),
        ),
        Edit(
            TRITON_BACKEND,
            old="            causal=True,\n            alibi_slopes=self.alibi_slopes,\n",
            new=(
                "            causal=attn_metadata.causal,  # kimi-dflash(triton-noncausal)\n"
                "            alibi_slopes=self.alibi_slopes,\n"
            ),
        ),
    ),
    needed_when=Need(
        "the DFlash drafter runs on TRITON_ATTN (only when configured: "
        "DRAFT_ATTENTION_BACKEND=TRITON_ATTN; ROCm gives it ROCM_ATTN)",
        ("dflash", "drafter on TRITON_ATTN"),
    ),
)

MLA_SWA_ASSERT = Patch(
    id="mla-swa-assert",
    title="sliding-window assert judges the layer, not the model",
    why=(
        "Attention.get_kv_cache_spec asserts 'MLA is not supported for slidingwindow' from the "
        "model-level model_config.use_mla. With an MLA target every plain sliding-window layer "
        "trips it, including the DFlash drafter's. The patch asks the layer's own backend "
        "(is_mla()), which keeps the real invariant."
    ),
    upstream_pr=floor.UPSTREAM,  # the newest fix: its probe is the patch floor
    upstream_since=floor.RELEASE,
    retired_when=(Probe(floor.PATH, floor.PATTERN, floor.WHAT),),
    edits=(
        Edit(
            ATTENTION_LAYER,
            old=(
                "            assert not vllm_config.model_config.use_mla, (\n"
                '                "MLA is not supported for slidingwindow"\n'
                "            )\n"
            ),
            new=(
                "            # kimi-dflash(mla-swa-assert): judge this layer, not the model: a\n"
                "            # drafter's sliding-window layer is plain attention next to an MLA target.\n"
                "            assert not self.attn_backend.is_mla(), (\n"
                '                "MLA is not supported for slidingwindow"\n'
                "            )\n"
            ),
        ),
    ),
    runtime="mla-swa-assert",
    runtime_hooks=(
        Probe(ATTENTION_LAYER, r"^class Attention\(", "class Attention"),
        Probe(
            ATTENTION_LAYER,
            r"def get_kv_cache_spec\(self, vllm_config",
            "Attention.get_kv_cache_spec(self, vllm_config)",
        ),
    ),
    needed_when=Need(
        "the target is MLA and the DFlash drafter has sliding-window layers",
        ("dflash", "mla target", "sliding-window drafter"),
    ),
)

PATCHES: tuple[Patch, ...] = (
    AITER_FA_NONCAUSAL,
    TARGET_MLA_CAUSAL,
    DFLASH_ASSERT_GATE,
    TRITON_NONCAUSAL,
    MLA_SWA_ASSERT,
)


def source_paths(patches: Iterable[Patch] = PATCHES) -> tuple[str, ...]:
    """Every file (relative to the vllm package) the patches read: edited or probed."""
    return tuple(dict.fromkeys(x.path for p in patches for x in (*p.edits, *p.retired_when, *p.runtime_hooks)))
