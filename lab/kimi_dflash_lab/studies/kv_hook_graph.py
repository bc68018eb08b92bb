"""The FP8 KV-scale hook on a real GPU, eager against a captured CUDA/HIP graph (plain torch: no vLLM needed).

The hook (kvscale/write_hook.py) promises to be graph-safe: in-place device ops only, no host sync, and a
device-side warm-up gate that keeps counting when a captured graph replays the write without running Python. On
the CPU build nothing is ever captured, so that promise was only checked by making host syncs raise. Here it is
run for real:

1. Correctness. The same sequence of MLA KV writes (decode-sized batches whose amax rises now and then, one row
   of CUDA-graph padding with slot -1) goes through the wrapped write twice: eagerly, and as one captured graph
   replayed once per write with the inputs copied into its static buffers. The k_scale after every write and the
   FP8 cache bytes at the end must be identical; the scale must follow the running amax during the warm-up and
   stay frozen after it.
2. Cost. One decode step of L MLA layers (each its own cache, scale and hook), timed with CUDA events, eager and
   replayed: the bare write, and the write wrapped for a dynamic scale while it warms up, after the warm-up, and
   for a calibrated scale. Per step and per layer.

The write the hook wraps is a stand-in for vLLM's concat_and_cache_mla with a per-tensor scale (the latent and the
rotary key side by side, divided by k_scale, saturated, cast to FP8, stored at slot_mapping; padding rows go to a
scratch slot): the hook does not depend on how the kernel is written, only on its arguments.

    python benchmarks/kv_hook_cuda_graph.py [--layers 61] [--tokens 96] [--format e4m3fn] [--json OUT]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kimi_dflash.core.options import declare, option, run

KV_LORA_RANK, ROPE_DIM = 512, 64  # Kimi K2.6 / DeepSeek-V3 MLA: one 576-value row per token
ROW = KV_LORA_RANK + ROPE_DIM


def stand_in_write(kv_cache_dtype: str = "fp8") -> Callable[..., None]:
    """A per-tensor-scaled MLA cache write with vLLM's argument order (kv_c_normed, k_pe, kv_cache, slot_mapping,
    kv_cache_dtype, k_scale): graph-safe (no boolean indexing; padding rows land in the cache's last slot)."""
    import torch

    def do_kv_cache_update(
        kv_c_normed: Any, k_pe: Any, kv_cache: Any, slot_mapping: Any, cache_dtype: str, k_scale: Any
    ) -> None:
        fp8_max = torch.finfo(kv_cache.dtype).max
        rows = torch.cat([kv_c_normed, k_pe], dim=-1).to(torch.float32) / k_scale
        flat = kv_cache.view(-1, ROW)
        slots = torch.where(slot_mapping >= 0, slot_mapping, flat.shape[0] - 1)
        quantized = rows.clamp(-fp8_max, fp8_max).to(kv_cache.dtype)
        flat.view(torch.uint8).index_copy_(0, slots, quantized.view(torch.uint8))  # bytes: no FP8 index_copy on CPU

    return do_kv_cache_update


@dataclass
class Layer:
    cache: Any
    k_scale: Any
    write: Callable[..., None]
    hook: Any = None


def make_layer(mode: str, fmt: Any, slots: int, device: str, warmup_writes: int, name: str = "layer") -> Layer:
    """One MLA layer's cache, scale and (wrapped) write. mode: bare | dynamic | calibrated."""
    import torch

    from kimi_dflash.kvscale.write_hook import LayerHook, wrap_kv_cache_update

    cache = torch.zeros((slots + 1, ROW), dtype=fmt.torch_dtype(), device=device)  # +1: the padding slot
    k_scale = torch.ones((), dtype=torch.float32, device=device)
    write = stand_in_write()
    if mode == "bare":
        return Layer(cache, k_scale, write)
    hook = LayerHook(name=name, kv_cache_dtype="fp8", fp8=fmt, warmup_writes=warmup_writes)
    if mode == "dynamic":
        hook.dynamic = True
    elif mode == "calibrated":
        hook.calibrated_scale, hook.scale_applied = 0.05, True
        k_scale.fill_(0.05)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    hook.k_scale = k_scale
    hook.stats.to_(k_scale.device)  # what kvscale/runtime.py does after weight loading, before any capture
    hook.query.to_(k_scale.device)
    return Layer(cache, k_scale, wrap_kv_cache_update(write, hook), hook)


def write_batches(count: int, tokens: int, device: str, seed: int = 0) -> list[tuple[Any, Any, Any]]:
    """(kv_c_normed, k_pe, slot_mapping) per write: bf16 latents whose amax rises every few writes (so a dynamic
    scale has something to follow), consecutive slots, and the last row marked as padding (slot -1) with a value
    far above the rest (it must not count)."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    batches = []
    for index in range(count):
        growth = 1.0 + 0.5 * (index // 3)  # the amax rises every third write
        kv = (torch.randn(tokens, KV_LORA_RANK, generator=generator) * growth).to(torch.bfloat16)
        pe = (torch.randn(tokens, ROPE_DIM, generator=generator) * growth).to(torch.bfloat16)
        kv[-1] = 1e4  # a padding row: its value must not reach the scale
        slots = torch.arange(index * tokens, (index + 1) * tokens, dtype=torch.int64)
        slots[-1] = -1
        batches.append((kv.to(device), pe.to(device), slots.to(device)))
    return batches


def run_eager(layer: Layer, batches: list[tuple[Any, Any, Any]]) -> list[float]:
    scales = []
    for kv, pe, slots in batches:
        layer.write(kv, pe, layer.cache, slots, "fp8", layer.k_scale)
        scales.append(float(layer.k_scale))  # read after the write, outside the hot path
    return scales


def run_graph(layer: Layer, batches: list[tuple[Any, Any, Any]]) -> list[float]:
    """Capture one write on static buffers (as vLLM does at start-up: its capture runs write nothing real), then
    replay it once per batch with the batch copied in."""
    import torch

    kv0, pe0, slots0 = batches[0]
    static_kv, static_pe = torch.zeros_like(kv0), torch.zeros_like(pe0)
    static_slots = torch.full_like(slots0, -1)  # capture-time contents are never written for real
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer.write(static_kv, static_pe, layer.cache, static_slots, "fp8", layer.k_scale)
    scales = []
    for kv, pe, slots in batches:
        static_kv.copy_(kv)
        static_pe.copy_(pe)
        static_slots.copy_(slots)
        graph.replay()
        scales.append(float(layer.k_scale))
    return scales


def expected_scales(batches: list[tuple[Any, Any, Any]], fp8_max: float, floor: float, warmup: int) -> list[float]:
    """The scale the hook should hold after each write: max |valid row| so far / fp8_max, frozen after warmup."""
    import torch

    scales, running, frozen = [], 0.0, None
    for index, (kv, pe, slots) in enumerate(batches, start=1):
        valid = slots >= 0
        rows = torch.cat([kv, pe], dim=-1).to(torch.float32).abs().amax(dim=-1)
        running = max(running, float(rows[valid].max()))
        scale = max(running / fp8_max, floor)
        if frozen is None:
            scales.append(scale)
            if 0 < warmup <= index:
                frozen = scale
        else:
            scales.append(frozen)
    return scales


def correctness(fmt: Any, tokens: int, writes: int, warmup: int, device: str) -> dict[str, Any]:
    import torch

    batches = write_batches(writes, tokens, device)
    eager = make_layer("dynamic", fmt, writes * tokens, device, warmup)
    eager_scales = run_eager(eager, batches)
    report: dict[str, Any] = {"writes": writes, "warmup_writes": warmup, "tokens": tokens, "format": fmt.name}
    want = expected_scales(batches, fmt.max_value, eager.hook.floor, warmup)
    report["eager_matches_expected"] = all(abs(a - b) <= 1e-6 * b for a, b in zip(eager_scales, want))
    report["eager_scales"] = eager_scales
    if device != "cuda":
        return report
    graphed = make_layer("dynamic", fmt, writes * tokens, device, warmup)
    graph_scales = run_graph(graphed, batches)
    report["graph_scales"] = graph_scales
    report["graph_scales_identical"] = graph_scales == eager_scales
    same_bytes = torch.equal(eager.cache.view(torch.uint8)[:-1], graphed.cache.view(torch.uint8)[:-1])
    report["cache_bytes_identical"] = bool(same_bytes)
    report["graph_writes_counted_on_device"] = int(graphed.hook.stats.writes)
    report["host_counted_graph_writes"] = graphed.hook.eager_writes  # replays run no Python: 0 expected
    return report


def _time(step: Callable[[], None], iterations: int) -> float:
    """Mean ms per call of ``step`` over ``iterations`` (CUDA events, after a warm-up)."""
    import torch

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iterations


def cost(fmt: Any, layers: int, tokens: int, iterations: int) -> list[dict[str, Any]]:
    """One decode step of ``layers`` MLA writes, eager and as a replayed graph, per hook mode."""
    import torch

    kv, pe, slots = write_batches(1, tokens, "cuda")[0]
    rows = []
    for mode, warmup, frozen in (
        ("bare", 0, False),
        ("dynamic", 1 << 30, False),
        ("dynamic", 1, True),
        ("calibrated", 0, False),
    ):
        stack = [make_layer(mode, fmt, tokens, "cuda", warmup, f"layer{i}") for i in range(layers)]
        if frozen:
            for layer in stack:
                layer.write(kv, pe, layer.cache, slots, "fp8", layer.k_scale)  # the one warm-up write
                assert layer.hook.frozen

        def step(stack: list[Layer] = stack) -> None:
            for layer in stack:
                layer.write(kv, pe, layer.cache, slots, "fp8", layer.k_scale)

        eager_ms = _time(step, iterations)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        graph_ms = _time(graph.replay, iterations)
        label = {"bare": "bare write (no hook)", "calibrated": "calibrated scale"}.get(mode) or (
            "dynamic, after the warm-up" if frozen else "dynamic, following the amax"
        )
        rows.append({"mode": label, "eager_ms_per_step": eager_ms, "graph_ms_per_step": graph_ms})
    bare = rows[0]
    for row in rows:
        for kind in ("eager", "graph"):
            extra = row[f"{kind}_ms_per_step"] - bare[f"{kind}_ms_per_step"]
            row[f"{kind}_us_per_layer_over_bare"] = extra * 1000 / layers
    return rows


@dataclass(kw_only=True)
class HookGraphOptions:
    layers: int = option("MLA layers per step (Kimi K2.6: 61)", default=61)
    tokens: int = option("rows per write (32 sequences x (1 + k=2): 96)", default=96)
    format: str = option("FP8 format (e4m3fnuz on MI300X)", choices=("e4m3fn", "e4m3fnuz", "e5m2"), default="e4m3fn")
    writes: int = option("writes in the correctness run", default=40)
    warmup_writes: int = option("dynamic warm-up in the correctness run", default=16)
    iterations: int = option("timed steps per mode", default=200)
    json: str | None = option("also write the figures to this file")
    cpu: bool = option("the eager correctness part only, on the CPU (a smoke run)")


add_cli_args = declare(
    HookGraphOptions,
    "The FP8 KV-scale hook on a real GPU: eager vs a captured CUDA/HIP graph (correctness, cost).",
    __doc__,
)


def main(args: HookGraphOptions) -> int:
    import torch

    from kimi_dflash.kvscale.fp8 import FORMATS

    fmt = FORMATS[args.format]
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print(
            "kv_hook_cuda_graph: no CUDA/HIP device visible to torch; --cpu runs the eager part only", file=sys.stderr
        )
        return 2
    found: dict[str, Any] = {
        "device": "cpu" if args.cpu else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "correctness": correctness(fmt, args.tokens, args.writes, args.warmup_writes, device),
    }
    check = found["correctness"]
    print(f"device: {found['device']}, torch {found['torch']}, format {fmt.name}, {args.tokens} rows per write")
    print(f"eager scale trajectory as expected (running amax, frozen after {args.warmup_writes} writes): "
          f"{check['eager_matches_expected']}")  # fmt: skip
    if not args.cpu:
        print(
            f"graph replay: scales identical to eager {check['graph_scales_identical']}, FP8 cache bytes identical "
            f"{check['cache_bytes_identical']}, writes counted on the device "
            f"{check['graph_writes_counted_on_device']} (on the host: {check['host_counted_graph_writes']})"
        )
        found["cost"] = cost(fmt, args.layers, args.tokens, args.iterations)
        print(
            f"\none decode step of {args.layers} MLA layer writes, {args.tokens} rows each ({args.iterations} steps):"
        )
        print(f"{'mode':<30} {'eager ms':>9} {'graph ms':>9} {'eager us/layer':>15} {'graph us/layer':>15}")
        for row in found["cost"]:
            print(
                f"{row['mode']:<30} {row['eager_ms_per_step']:>9.3f} {row['graph_ms_per_step']:>9.3f} "
                f"{row['eager_us_per_layer_over_bare']:>15.2f} {row['graph_us_per_layer_over_bare']:>15.2f}"
            )
    if args.json:
        from pathlib import Path

        Path(args.json).write_text(json.dumps(found, indent=2), encoding="utf-8")
    ok = check["eager_matches_expected"] and (
        args.cpu or (check["graph_scales_identical"] and check["cache_bytes_identical"])
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run(__name__, prog="kv_hook_cuda_graph.py"))
