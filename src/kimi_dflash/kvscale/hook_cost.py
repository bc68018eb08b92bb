"""What the KV-scale hook costs per decode step, measured on real vLLM CPU servers (the MLA path).

One run starts one vLLM CPU server per mode on the same fabricated DeepSeek-V3 (MLA) model, all at once, then
sends greedy streaming requests one at a time, round-robin over the servers, so every mode is measured in the
same minutes. Per request and mode: the CPU time the server's processes (API server, engine core, worker) spent
per generated token - one decode step per token here (no speculation, one sequence) - and, for reference, the
wall-clock time per output token after the first (TPOT). CPU time is the figure to read on a shared machine:
other jobs stretch wall time, not the CPU time a step consumes. Reported per mode: medians, and the median of
the per-round differences from `off` (each round measures every mode back to back).

Modes (what a mode adds on top of `off`):
  off              no hook.
  observe          the running amax per write (what calibration pays; also the decode-query amax).
  dynamic-emulated the running amax plus the dynamic k_scale update, on an FP8 cache *emulated* in BF16 (the CPU
                   MLA decode kernel cannot read a real FP8 cache), so it also pays the FP8 round trip.
  emulated         the FP8 round trip with a fixed scale, no scale update: subtract it from dynamic-emulated to
                   isolate the dynamic update.
  dynamic-frozen   dynamic-emulated with a warm-up of 32 writes: after it the scale is frozen.

Also printed: the wrapper alone, in-process, on decode-sized tensors (µs per call; one call per MLA layer per
step), for the production path (dynamic scale on a real FP8 E4M3 cache: no emulation), warming and frozen.

    python benchmarks/kv_scale_hook_cost.py [--requests 24] [--max-tokens 64] [--layers 2]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MODES: dict[str, dict[str, str]] = {
    "off": {},
    "observe": {"KIMI_DFLASH_KV_SCALE_MODE": "observe"},  # + KIMI_DFLASH_KV_OBSERVE_DIR, set per run
    "emulated": {"KIMI_DFLASH_KV_EMULATE_FP8": "e4m3fn"},
    "dynamic-emulated": {"KIMI_DFLASH_KV_SCALE_MODE": "dynamic", "KIMI_DFLASH_KV_EMULATE_FP8": "e4m3fn"},
    "dynamic-frozen": {"KIMI_DFLASH_KV_SCALE_MODE": "dynamic", "KIMI_DFLASH_KV_EMULATE_FP8": "e4m3fn",
                       "KIMI_DFLASH_KV_SCALE_WARMUP_STEPS": "32"},
}
SERVER_ARGS = ["--max-model-len", "1024", "--dtype", "bfloat16", "--max-num-seqs", "4"]
PROMPT = "Explain in detail how a key-value cache speeds up autoregressive decoding in transformers."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stream_tpot(port: int, model: str, max_tokens: int) -> float:
    """Wall seconds per output token after the first chunk, for one greedy streamed completion of exactly
    max_tokens (tokens, not chunks: a loaded API server may merge several tokens into one chunk)."""
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"port {port}: HTTP {response.status}: {response.read()[:200]!r}")
    stamps = []
    for raw in response:
        line = raw.strip()
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            if json.loads(line[6:]).get("choices"):
                stamps.append(time.perf_counter())
    connection.close()
    if len(stamps) < 2:
        raise RuntimeError(f"port {port}: only {len(stamps)} chunks streamed")
    return (stamps[-1] - stamps[0]) / (max_tokens - 1)


def process_cpu_seconds(root_pid: int) -> float:
    """User + system CPU seconds of a server and all its descendants (engine core, workers) so far."""
    import psutil

    try:
        root = psutil.Process(root_pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


@dataclass
class ModeResult:
    mode: str
    tpot_s: list[float]
    cpu_per_token_s: list[float]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.tpot_s) * 1e3

    @property
    def cpu_median_ms(self) -> float:
        return statistics.median(self.cpu_per_token_s) * 1e3


def paired_delta_ms(result: ModeResult, off: ModeResult, field: str) -> float:
    """Median over rounds of (mode - off) in the same round."""
    mine, base = getattr(result, field), getattr(off, field)
    return statistics.median(a - b for a, b in zip(mine, base, strict=True)) * 1e3


def measure_servers(model: Path, modes: list[str], requests: int, max_tokens: int, log_dir: Path,
                    say: Callable[[str], None]) -> list[ModeResult]:
    from kimi_dflash.kvscale.local_server import start_server

    servers = {}
    try:
        for mode in modes:
            env = dict(MODES[mode])
            if mode == "observe":
                env["KIMI_DFLASH_KV_OBSERVE_DIR"] = str(log_dir / "observe")
            say(f"starting vLLM CPU server for mode {mode}")
            servers[mode] = start_server(model, free_port(), log_dir / f"{mode}.log", env=env, args=SERVER_ARGS,
                                         timeout=600)
        results = {mode: ModeResult(mode, [], []) for mode in modes}
        for mode, server in servers.items():  # warm-up: one request each, not measured
            stream_tpot(server.port, str(model), max_tokens)
        for index in range(requests):
            for mode, server in servers.items():
                cpu_before = process_cpu_seconds(server.process.pid)
                results[mode].tpot_s.append(stream_tpot(server.port, str(model), max_tokens))
                cpu = process_cpu_seconds(server.process.pid) - cpu_before
                results[mode].cpu_per_token_s.append(cpu / max_tokens)
            say(f"round {index + 1}/{requests}: " + ", ".join(
                f"{m} {r.cpu_per_token_s[-1] * 1e3:.2f} ms cpu/{r.tpot_s[-1] * 1e3:.1f} ms wall"
                for m, r in results.items()))
        return list(results.values())
    finally:
        for server in servers.values():
            server.stop()


def wrapper_microbench(layers: int, calls: int = 2000) -> dict[str, float]:
    """µs per wrapped do_kv_cache_update call on decode-sized tensors (1 token, latent 512 + rope 64, bf16),
    for the production path: dynamic scale on a real FP8 E4M3 cache (no emulation)."""
    import torch

    from kimi_dflash.kvscale.fp8 import FORMATS
    from kimi_dflash.kvscale.write_hook import LayerHook, wrap_kv_cache_update

    kv_c = torch.randn(1, 512, dtype=torch.bfloat16)
    k_pe = torch.randn(1, 1, 64, dtype=torch.bfloat16)
    cache = torch.zeros(16, 16, 576, dtype=torch.uint8)
    slots = torch.tensor([3])
    scale = torch.ones((), dtype=torch.float32)

    def write(*args: object, **kwargs: object) -> None:
        return None

    def per_call(hook: LayerHook | None) -> float:
        """Best of 5 batches of CPU time per call (the least disturbed by other jobs on a shared machine)."""
        fn = write if hook is None else wrap_kv_cache_update(write, hook)
        for _ in range(50):
            fn(kv_c, k_pe, cache, slots, "fp8", scale)
        best = float("inf")
        for _ in range(5):
            start = time.process_time()
            for _ in range(calls):
                fn(kv_c, k_pe, cache, slots, "fp8", scale)
            best = min(best, (time.process_time() - start) / calls * 1e6)
        return best

    fp8 = FORMATS["e4m3fn"]
    bare = per_call(None)
    warming = per_call(LayerHook("l", "fp8", fp8, dynamic=True, warmup_writes=0)) - bare
    frozen = per_call(LayerHook("l", "fp8", fp8, dynamic=True, warmup_writes=10)) - bare
    observing = per_call(LayerHook("l", "auto", None)) - bare
    return {"dynamic (following) per layer": warming, "dynamic (frozen) per layer": frozen,
            "observe per layer": observing, f"dynamic (following) per step, {layers} layers": warming * layers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/kv_scale_hook_cost.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=24, help="measured requests per mode (default 24)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per request (default 64)")
    parser.add_argument("--layers", type=int, default=2, help="MLA layers of the fabricated model (default 2)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {', '.join(MODES)}")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if "off" not in modes or any(m not in MODES for m in modes):
        parser.error(f"--modes must include off and name only {', '.join(MODES)}")

    from kimi_dflash.kvscale.tiny_mla import ensure_tiny_mla_model
    from kimi_dflash.paths import cache_root

    def say(message: str) -> None:
        print(message, flush=True)

    model = ensure_tiny_mla_model(cache_root() / "kvscale" / f"tiny-mla-{args.layers}l-gain1", latent_gain=1.0,
                                  num_layers=args.layers)
    micro = wrapper_microbench(args.layers)
    with tempfile.TemporaryDirectory(prefix="kv-hook-cost-") as tmp:
        results = measure_servers(model, modes, args.requests, args.max_tokens, Path(tmp), say)
    off = next(r for r in results if r.mode == "off")
    print(f"\nKV-scale hook cost per decode step, vLLM CPU MLA ({args.layers} layers, 1 sequence, "
          f"{args.requests} x {args.max_tokens} tokens per mode; same run, round-robin):")
    print(f"  {'mode':17s} {'CPU ms/token':>12s} {'vs off (paired)':>16s}   {'wall TPOT':>10s} {'vs off':>9s}")
    for result in results:
        cpu_delta = paired_delta_ms(result, off, "cpu_per_token_s")
        wall_delta = paired_delta_ms(result, off, "tpot_s")
        print(f"  {result.mode:17s} {result.cpu_median_ms:12.3f} {cpu_delta:+9.3f} ({cpu_delta / off.cpu_median_ms * 100:+5.1f} %)"
              f"   {result.median_ms:10.3f} {wall_delta:+9.3f}")
    print("wrapper alone, in-process (CPU µs per call over a no-op write, best of 5 x 2000; production path, real "
          "FP8 format):")
    for name, value in micro.items():
        print(f"  {name:45s} {value:7.1f} µs")
    return 0
