"""Issue 8, defect 5: what the KV-scale hook costs and records.

* Production freezes its dynamic scale after a bounded warm-up; from then on the wrapper must run no tensor op at
  all (counted with a TorchFunctionMode), and still hand vLLM 0.33 `skip_scale=False`.
* The host-side freeze and the device-side gate (kept for CUDA-graph replays) give the same scale.
* Observe mode records the decode query's amax (vLLM quantises that query with `_q_scale` = 1.0 on FP8 caches),
  and calibration reports whether 1.0 would clip it.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="needs the cpu extra (launchers/setup-cpu.sh)")

import torch
from torch.overrides import TorchFunctionMode

from kimi_dflash.kvscale.fp8 import E4M3FN
from kimi_dflash.kvscale.observer import snapshot
from kimi_dflash.kvscale.scale_math import QueryStats
from kimi_dflash.kvscale.scales_file import (
    ModelIdentity,
    merge_observations,
    scales_document,
)
from kimi_dflash.kvscale.write_hook import (
    LayerHook,
    wrap_decode_query,
    wrap_kv_cache_update,
    wrap_query_quant,
)
from kv_write_helpers import batch, reference_write_033

# Kernels per write while a dynamic scale warms up (docs/fp8-kv.md quotes it): the batch amax in 7, the running
# max and the write counter in 2, the scale in 2, its warm-up gate in 2, the copy into k_scale in 1. The version
# before issue 8 launched 23-25, and kept launching them after the warm-up.
MAX_KERNELS_WHILE_WARMING = 14
# Reading metadata or making a view launches nothing.
NOT_KERNELS = {"numel", "dim", "__get__", "__getitem__", "reshape", "view", "size", "expand_as"}


class CountOps(TorchFunctionMode):
    """Counts the torch functions that launch work (metadata reads and views excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = getattr(func, "__name__", str(func))
        if name not in NOT_KERNELS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def dynamic(warmup: int, **extra: object) -> LayerHook:
    return LayerHook(
        name="model.layers.0.self_attn.attn",
        kv_cache_dtype="fp8",
        fp8=E4M3FN,
        dynamic=True,
        warmup_writes=warmup,
        **extra,
    )


def test_after_the_warm_up_the_wrapper_runs_no_tensor_op_and_still_owns_skip_scale() -> None:
    seen = []
    hook = dynamic(warmup=3)
    wrapped = wrap_kv_cache_update(lambda *a: seen.append(a[6]), hook)
    kv_c, k_pe, cache, slots = batch()
    k_scale = torch.tensor(1.0)
    counts = []
    for _ in range(5):
        with CountOps() as ops:
            wrapped(kv_c, k_pe, cache, slots, "fp8", k_scale, True)
        counts.append(len(ops.calls))
    assert all(0 < n <= MAX_KERNELS_WHILE_WARMING for n in counts[:3]), counts
    assert counts[3:] == [0, 0] and hook.frozen
    assert seen == [False] * 5  # vLLM 0.33 would otherwise ignore the scale we own


def test_host_freeze_and_device_gate_reach_the_same_scale() -> None:
    """observing=True keeps the wrapper computing (device gate only); without it the host freezes. Same scale."""
    host_frozen, device_gated = dynamic(warmup=4), dynamic(warmup=4, observing=True)
    scales = {}
    for name, hook in (("host", host_frozen), ("device", device_gated)):
        k_scale = torch.tensor(1.0)
        wrapped = wrap_kv_cache_update(reference_write_033, hook)
        for step in range(8):  # the amax keeps growing after the warm-up: a frozen scale must not follow it
            kv_c, k_pe, cache, slots = batch(seed=step, magnitude=10.0 * (step + 1))
            wrapped(kv_c, k_pe, cache, slots, "fp8", k_scale, True)
        scales[name] = k_scale.item()
    assert host_frozen.frozen and not device_gated.frozen
    assert scales["host"] == scales["device"]
    kv_c, k_pe, _, _ = batch(seed=3, magnitude=40.0)  # the 4th (last warm-up) write
    first_four = max(
        max(
            batch(seed=s, magnitude=10.0 * (s + 1))[0].float().abs().max().item(),
            batch(seed=s, magnitude=10.0 * (s + 1))[1].float().abs().max().item(),
        )
        for s in range(4)
    )
    assert scales["host"] == torch.tensor(first_four / 448.0, dtype=torch.float64).to(torch.float32).item()


def test_a_never_frozen_scale_keeps_following() -> None:
    hook = dynamic(warmup=0)
    wrapped = wrap_kv_cache_update(lambda *a: None, hook)
    kv_c, k_pe, cache, slots = batch()
    for _ in range(5):
        wrapped(kv_c, k_pe, cache, slots, "fp8", torch.tensor(1.0))
    assert not hook.frozen and hook.stats.writes.item() == 5


def test_the_decode_query_amax_is_recorded_from_either_hook_point() -> None:
    hook = LayerHook(name="l0", kv_cache_dtype="auto", fp8=None, observing=True)
    ql_nope = torch.randn(3, 4, 512, dtype=torch.bfloat16) * 50
    q_pe = torch.randn(3, 4, 64, dtype=torch.bfloat16) * 900  # the rope part holds the maximum
    ql_nope[1, 2, 7] = float("nan")  # vLLM's padded rows may hold garbage: non-finite values never count
    out = wrap_decode_query(lambda q, *rest: "attended", hook)((ql_nope, q_pe), "cache", "metadata", "layer")
    assert out == "attended"
    assert hook.query.amax.item() == q_pe.float().abs().max().item() and hook.query.calls.item() == 1
    # Already quantised by vLLM (AITER MLA on an FP8 cache): not recorded here ...
    wrap_decode_query(lambda q, *rest: None, hook)(q_pe.to(torch.float8_e4m3fn), None, None, None)
    assert hook.query.calls.item() == 1
    # ... but before quantisation, by the quant op's wrapper.
    bigger = q_pe * 2
    wrap_query_quant(lambda a, b, scale: (a, b, scale), hook)(ql_nope, bigger, torch.tensor(1.0))
    assert hook.query.amax.item() == bigger.float().abs().max().item() and hook.query.calls.item() == 2


def test_observe_dump_and_scales_file_report_whether_q_scale_one_clips() -> None:
    layers = {}
    for index, q_amax in enumerate((180.0, 300.0)):
        hook = LayerHook(name=f"model.layers.{index}.self_attn.attn", kv_cache_dtype="auto", fp8=None, observing=True)
        kv_c, k_pe, _, slots = batch(seed=index)
        hook.stats.observe_(kv_c, k_pe, slots)
        hook.query = QueryStats()
        hook.query.observe_(torch.full((2, 8), q_amax))
        layers[hook.name] = hook
    dump = snapshot(layers)
    assert [entry["q_amax"] for entry in dump.values()] == [180.0, 300.0]
    merged = merge_observations([{"layers": dump}, {"layers": {k: {**v, "q_amax": 1.0} for k, v in dump.items()}}])
    document = scales_document(
        identity=ModelIdentity("m", {}),
        vllm_version="0.32.0",
        fp8_format="e4m3fn",
        fp8_max=448.0,
        floor=1e-4,
        layers=merged,
        source={},
        created="now",
    )
    query = document["decode_query"]
    assert query["amax_range"] == [180.0, 300.0] and query["q_scale_in_vllm"] == 1.0
    assert query["clips_at_q_scale_1"] == {"e4m3fn": False, "e4m3fnuz": True}
    assert query["layers_clipping_e4m3fnuz"] == 1
    assert document["layers"]["model.layers.1.self_attn.attn"]["q_amax"] == 300.0


def test_files_from_before_the_query_was_recorded_still_work() -> None:
    merged = merge_observations([{"layers": {"a": {"amax": 2.0, "tokens": 3}}}])
    document = scales_document(
        identity=ModelIdentity("m", {}),
        vllm_version="x",
        fp8_format="e4m3fn",
        fp8_max=448.0,
        floor=1e-4,
        layers=merged,
        source={},
        created="now",
    )
    assert document["decode_query"] is None and "q_amax" not in document["layers"]["a"]


def test_a_calibrated_scale_launches_nothing_in_the_forward_pass() -> None:
    hook = LayerHook(name="l0", kv_cache_dtype="fp8", fp8=E4M3FN, calibrated_scale=0.05, scale_applied=True)
    seen = []
    wrapped = wrap_kv_cache_update(lambda *a: seen.append(a[6]), hook)
    kv_c, k_pe, cache, slots = batch()
    k_scale = torch.tensor(0.05)
    with CountOps() as ops:
        wrapped(kv_c, k_pe, cache, slots, "fp8", k_scale, True)
    assert ops.calls == [] and seen == [False]
