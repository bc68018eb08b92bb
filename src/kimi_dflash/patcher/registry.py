"""The patches the recipe needs to run DFlash next to an MLA target on ROCm, per vLLM version (docs/patches.md).

Edits live in kimi_dflash/data/patches/<id>.diff (anchors read from the PyPI wheels 0.20.0 - 0.33.0);
`upstream_since` is for the docs only. Patched code never imports kimi_dflash, so a patched image works without it."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources

from kimi_dflash.patcher import floor
from kimi_dflash.patcher.model import Edit, Need, Patch, Probe

_FILE_HEADER = "+++ b/vllm/"


def read_edits(patch_id: str) -> tuple[Edit, ...]:
    """The edits in data/patches/<patch_id>.diff: one per hunk, its ' ' and '-' lines the anchor, its ' ' and '+'
    lines the replacement (an empty line is blank context)."""
    diff = resources.files("kimi_dflash").joinpath("data", "patches", f"{patch_id}.diff").read_text(encoding="utf-8")
    path, hunks = "", []  # hunks: (file, anchor lines, replacement lines)
    for line in diff.splitlines(keepends=True):
        if line.startswith(_FILE_HEADER):
            path = line[len(_FILE_HEADER) :].strip()
        elif line.startswith("@@"):
            hunks.append((path, [], []))
        elif hunks and not line.startswith("--- a/vllm/"):
            kind, text = (line[0], line[1:]) if line[0] in " -+" else (" ", line)
            _, old, new = hunks[-1]
            if kind != "+":
                old.append(text)
            if kind != "-":
                new.append(text)
    return tuple(Edit(path, "".join(old), "".join(new)) for path, old, new in hunks)


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
    upstream_since=floor.OLDEST,
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
        f"no source patch is carried for builds older than vLLM {floor.OLDEST}: PyPI's 0.19.x wheels have "
        "no DFlash proposer at all, and the 0.19.2 nightlies the recipe started from cannot be "
        f"fetched to write anchors against. Use vLLM >= {floor.OLDEST}."
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
        Probe(SELECTOR, r"attention_config\.use_non_causal", "the selector reads the model's own use_non_causal"),
    ),
    edits=read_edits("target-mla-causal"),
    runtime="target-mla-causal",
    runtime_hooks=(
        Probe(SELECTOR, r"^def _cached_get_attn_backend\(", "module-level _cached_get_attn_backend() in the selector"),
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
        Probe(DFLASH, r"if not self\.dflash_causal:", "the DFlash metadata check runs only for a non-causal drafter"),
    ),
    edits=read_edits("dflash-assert-gate"),
    runtime="dflash-assert-gate",
    runtime_hooks=(
        Probe(DFLASH, r"^class DFlashProposer\(", "class DFlashProposer"),
        Probe(DFLASH, r"def build_per_group_and_layer_attn_metadata\(", "DFlashProposer's metadata builder"),
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
        Probe(TRITON_KERNEL, r"USE_CAUSAL: tl\.constexpr", "the unified Triton kernel has a USE_CAUSAL constexpr"),
        Probe(TRITON_BACKEND, r"def supports_non_causal\(cls\)", "TRITON_ATTN declares supports_non_causal()"),
    ),
    edits=read_edits("triton-noncausal"),
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
    edits=read_edits("mla-swa-assert"),
    runtime="mla-swa-assert",
    runtime_hooks=(
        Probe(ATTENTION_LAYER, r"^class Attention\(", "class Attention"),
        Probe(ATTENTION_LAYER, r"def get_kv_cache_spec\(self, vllm_config", "Attention.get_kv_cache_spec()"),
    ),
    needed_when=Need(
        "the target is MLA and the DFlash drafter has sliding-window layers",
        ("dflash", "mla target", "sliding-window drafter"),
    ),
)

PATCHES = (AITER_FA_NONCAUSAL, TARGET_MLA_CAUSAL, DFLASH_ASSERT_GATE, TRITON_NONCAUSAL, MLA_SWA_ASSERT)


def source_paths(patches: Iterable[Patch] = PATCHES) -> tuple[str, ...]:
    """Every file (relative to the vllm package) the patches read: edited or probed."""
    return tuple(dict.fromkeys(x.path for p in patches for x in (*p.edits, *p.retired_when, *p.runtime_hooks)))
