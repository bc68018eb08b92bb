"""Run a patched vLLM Triton unified-attention kernel on CPU (Triton's interpreter) and compare it
with a plain PyTorch reference, causal and non-causal (the patcher's `triton-noncausal`, docs/patches.md).

    TRITON_INTERPRET=1 python -m kimi_dflash_lab kernel-check /path/to/patched/vllm

The kernel file and its helper module are loaded from the given tree (a wheel's sources patched by
`apply`), next to the installed vLLM for the small utilities they import. vLLM's CPU build
disables Triton in `vllm.triton_utils`, so the two imports of Triton are pointed at Triton itself
while loading. Prints one line per case and exits 1 if any output differs from the reference.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from kimi_dflash.core.options import declare, option, run

KERNEL = "v1/attention/ops/triton_unified_attention.py"
HELPERS = "v1/attention/ops/triton_attention_helpers.py"


def _load(name: str, path: Path, replacements: dict[str, str]) -> ModuleType:
    source = path.read_text()
    for old, new in replacements.items():
        if old not in source:
            raise SystemExit(f"{path}: expected `{old}` to redirect; is this a 0.20-0.23 tree?")
        source = source.replace(old, new)
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[name] = module
    # Triton's JIT reads kernel source through linecache/inspect, keyed by the code's filename.
    import linecache

    linecache.cache[str(path)] = (len(source), None, source.splitlines(True), str(path))
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - loading a kernel
    return module


def load_kernel(vllm_root: Path) -> ModuleType:
    triton_import = "from vllm.triton_utils import tl, triton"
    real_triton = "import triton\nimport triton.language as tl"
    _load("kd_triton_helpers", vllm_root / HELPERS, {triton_import: real_triton})
    return _load(
        "kd_triton_unified_attention",
        vllm_root / KERNEL,
        {
            triton_import: real_triton,
            "from vllm.v1.attention.ops.triton_attention_helpers import": "from kd_triton_helpers import",
        },
    )


def reference(q, k_cache, v_cache, block_table, query_lens, seq_lens, causal, scale):
    import torch

    out = torch.empty_like(q)
    num_q_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    block_size = k_cache.shape[1]
    start = 0
    for seq, (q_len, s_len) in enumerate(zip(query_lens, seq_lens, strict=True)):
        positions = torch.arange(s_len)
        slots = block_table[seq, positions // block_size].long() * block_size + positions % block_size
        keys = k_cache.reshape(-1, num_kv_heads, k_cache.shape[3])[slots]  # [s_len, kv, d]
        values = v_cache.reshape(-1, num_kv_heads, v_cache.shape[3])[slots]
        queries = q[start : start + q_len]  # [q_len, h, d]
        keys = keys.repeat_interleave(group, dim=1)
        values = values.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", queries, keys) * scale
        if causal:
            context = s_len - q_len
            allowed = torch.arange(s_len)[None, :] <= (context + torch.arange(q_len))[:, None]
            scores = scores.masked_fill(~allowed[None], float("-inf"))
        out[start : start + q_len] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), values)
        start += q_len
    return out


def run_case(kernel: ModuleType, causal: bool, seed: int = 0) -> tuple[float, float]:
    """(max |kernel - reference|, max |reference - reference with the other mask|) for one
    random batch; the second number shows the case can tell causal from non-causal."""
    import torch

    torch.manual_seed(seed)
    head_size, num_q_heads, num_kv_heads, block_size = 32, 4, 2, 16
    query_lens, context_lens = (
        [4, 3, 1],
        [5, 20, 9],
    )  # DFlash blocks next to a plain decode
    seq_lens = [c + q for c, q in zip(context_lens, query_lens, strict=True)]
    blocks_per_seq = max((s + block_size - 1) // block_size for s in seq_lens)
    num_blocks = blocks_per_seq * len(seq_lens) + 1
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_size)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_size)
    block_table = torch.randperm(num_blocks - 1)[: blocks_per_seq * len(seq_lens)]
    block_table = block_table.view(len(seq_lens), blocks_per_seq).to(torch.int32)
    q = torch.randn(sum(query_lens), num_q_heads, head_size)
    out = torch.zeros_like(q)
    cu_seqlens_q = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    scale = head_size**-0.5
    kernel.unified_attention(
        q=q,
        k=k_cache,
        v=v_cache,
        out=out,
        cu_seqlens_q=cu_seqlens_q,
        max_seqlen_q=max(query_lens),
        seqused_k=torch.tensor(seq_lens, dtype=torch.int32),
        max_seqlen_k=max(seq_lens),
        softmax_scale=scale,
        causal=causal,
        window_size=(-1, -1),
        block_table=block_table,
        softcap=0,
        q_descale=None,
        k_descale=torch.ones(1),
        v_descale=torch.ones(1),
    )
    expected = reference(q, k_cache, v_cache, block_table, query_lens, seq_lens, causal, scale)
    other = reference(q, k_cache, v_cache, block_table, query_lens, seq_lens, not causal, scale)
    return float((out - expected).abs().max()), float((other - expected).abs().max())


@dataclass(kw_only=True)
class KernelCheckOptions:
    vllm_root: Path = option("the patched `vllm` tree to load the kernel from", positional=True, required=True)


add_cli_args = declare(KernelCheckOptions, __doc__)


def main(args: KernelCheckOptions) -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print(
            "set TRITON_INTERPRET=1 (the kernel runs in Triton's CPU interpreter)",
            file=sys.stderr,
        )
        return 2
    kernel = load_kernel(args.vllm_root)
    ok = True
    for causal in (True, False):
        diff, mask_effect = run_case(kernel, causal)
        ok = ok and diff < 1e-4 and mask_effect > 1e-2
        print(
            f"causal={causal}: max |kernel - reference| = {diff:.2e} (the other mask would differ by {mask_effect:.2e})"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab kernel-check"))
