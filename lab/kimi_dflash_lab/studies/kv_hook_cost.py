"""What the KV-scale hook costs per decode step, measured on real vLLM CPU servers (the MLA path).

One run starts one vLLM CPU server per mode on the same fabricated DeepSeek-V3 (MLA) model, all at once, then
sends greedy requests one at a time, round-robin over the servers, so every mode is measured in the same
minutes. A round sends each server a short and a long request (--short / --max-tokens output tokens, ignoring
EOS); their difference divided by the extra tokens is the cost of one decode step (no speculation, one
sequence), free of prefill and per-request overhead. Measured twice per step: wall time, and the CPU time of the
server's model worker (OMP_NUM_THREADS=1, so no thread spins). Reported per mode: the medians, and the median of the
per-round differences from `off` (each round measures every mode back to back). On this shared 2-core machine
both still move by more than the hook costs; the in-process figures below them do not.

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

    python benchmarks/kv_scale_hook_cost.py [--requests 10] [--max-tokens 520] [--layers 4] [--plugin-src DIR]

--plugin-src runs the servers and the in-process figures with another checkout's kimi_dflash (e.g. the commit
before a change to the hook), so before/after figures come from the same harness.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.envvars import HF_HUB_OFFLINE, KV_EMULATE_FP8
from kimi_dflash.core.options import declare, option
from kimi_dflash.launch.serve_sh import free_port

EMULATE_FP8 = {KV_EMULATE_FP8: "e4m3fn"}  # not a config key: a CPU test aid, set on vLLM's processes directly
# Per mode: (config keys over SERVER_CONFIG, variables for vLLM's processes).
MODES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "off": ({}, {}),
    "observe": ({"KV_SCALE_MODE": "observe"}, {}),  # + KV_OBSERVE_DIR, set per run
    "emulated": ({}, EMULATE_FP8),
    "dynamic-emulated": ({"KV_SCALE_MODE": "dynamic"}, EMULATE_FP8),
    "dynamic-frozen": ({"KV_SCALE_MODE": "dynamic", "KV_SCALE_WARMUP_STEPS": "32"}, EMULATE_FP8),
}
# The config every mode's server starts from (serve.sh's path: config -> plan -> launch). BLOCK_SIZE: vLLM's CPU
# MLA backend overrides it to 16; KV_CACHE_DTYPE=auto with the emulation (the CPU MLA kernel reads no FP8 cache).
SERVER_CONFIG = """\
DEVICE=cpu
SERVED_MODEL_NAME=tiny-mla
SPECULATIVE_METHOD=none
TENSOR_PARALLEL_SIZE=1
MOE_BACKEND=auto
TRUST_REMOTE_CODE=false
DTYPE=bfloat16
MAX_MODEL_LEN=1024
MAX_NUM_SEQS=4
MAX_NUM_BATCHED_TOKENS=1024
BLOCK_SIZE=32
ENABLE_PREFIX_CACHING=true
TOOL_CALL_PARSER=
ENABLE_AUTO_TOOL_CHOICE=false
REASONING_PARSER=
READY_TIMEOUT_S=600
"""
# One compute thread per server: no OpenMP spin-waiting in the CPU figures, and five servers fit two cores.
# HF_HUB_OFFLINE: a local fabricated model never needs the hub.
SERVER_ENV = {"OMP_NUM_THREADS": "1", HF_HUB_OFFLINE: "1"}
PROMPT = "Explain in detail how a key-value cache speeds up autoregressive decoding in transformers."


def timed_completion(port: int, model: str, max_tokens: int, server_pid: int) -> tuple[float, float]:
    """(wall seconds, server CPU seconds) of one greedy, non-streamed completion of exactly max_tokens."""
    body = json.dumps(
        {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    )
    cpu_before = process_cpu_seconds(server_pid)
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    payload = response.read()
    connection.close()
    wall = time.perf_counter() - started
    if response.status != 200:
        raise RuntimeError(f"port {port}: HTTP {response.status}: {payload[:200]!r}")
    produced = json.loads(payload)["usage"]["completion_tokens"]
    if produced != max_tokens:
        raise RuntimeError(f"port {port}: asked for {max_tokens} tokens, got {produced}")
    return wall, process_cpu_seconds(server_pid) - cpu_before


def process_cpu_seconds(root_pid: int) -> float:
    """User + system CPU seconds so far of the server's model worker (the process whose forward pass runs the
    hook; "VLLM::Worker"), or of the whole server tree when no worker process is named so."""
    import psutil

    try:
        root = psutil.Process(root_pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    workers = []
    for process in processes:
        try:
            if (process.cmdline() or [""])[0].startswith("VLLM::Worker"):
                workers.append(process)
        except psutil.NoSuchProcess:
            continue
    processes = workers or processes
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
    tpot_s: list[float]  # wall seconds per decode step, one value per round
    cpu_per_token_s: list[float]  # server CPU seconds per decode step

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


def measure_servers(
    model: Path,
    modes: list[str],
    requests: int,
    short: int,
    long: int,
    log_dir: Path,
    plugin_src: Path,
    say: Callable[[str], None],
) -> list[ModeResult]:
    from kimi_dflash_lab.studies.local_server import start_local_server

    config_path = log_dir / "tiny-mla-cpu.env"
    config_path.write_text(f"{SERVER_CONFIG}MODEL_DIR={model}\n", encoding="utf-8")
    servers = {}
    try:
        for mode in modes:
            keys, process_env = MODES[mode]
            overrides = {**keys, "PORT": str(free_port())}
            if mode == "observe":
                overrides["KV_OBSERVE_DIR"] = str(log_dir / "observe")
            say(f"starting vLLM CPU server for mode {mode}")
            servers[mode] = start_local_server(
                config_path,
                log_dir / f"{mode}.log",
                overrides=overrides,
                process_env={**SERVER_ENV, **process_env, "PYTHONPATH": str(plugin_src)},
                say=say,
            )
        results = {mode: ModeResult(mode, [], []) for mode in modes}
        for server in servers.values():  # warm-up: one request each, not measured
            timed_completion(server.port, server.model, long, server.process.pid)
        for index in range(requests):
            for mode, server in servers.items():
                wall_short, cpu_short = timed_completion(server.port, server.model, short, server.process.pid)
                wall_long, cpu_long = timed_completion(server.port, server.model, long, server.process.pid)
                results[mode].tpot_s.append((wall_long - wall_short) / (long - short))
                results[mode].cpu_per_token_s.append((cpu_long - cpu_short) / (long - short))
            say(
                f"round {index + 1}/{requests}: "
                + ", ".join(
                    f"{m} {r.tpot_s[-1] * 1e3:.2f} ms wall/{r.cpu_per_token_s[-1] * 1e3:.2f} ms cpu"
                    for m, r in results.items()
                )
            )
        return list(results.values())
    finally:
        for server in servers.values():
            server.stop()


MICROBENCH = r"""
import dataclasses, json, sys, time
import torch
from kimi_dflash.kvscale.fp8 import FORMATS
from kimi_dflash.kvscale.write_hook import LayerHook, wrap_kv_cache_update

calls = int(sys.argv[1])
kv_c = torch.randn(1, 512, dtype=torch.bfloat16)          # one decode token: latent 512 + rope 64
k_pe = torch.randn(1, 1, 64, dtype=torch.bfloat16)
cache = torch.zeros(16, 16, 576, dtype=torch.uint8)
slots = torch.tensor([3])
scale = torch.ones((), dtype=torch.float32)
observing = {"observing": True} if "observing" in {f.name for f in dataclasses.fields(LayerHook)} else {}

def write(*args, **kwargs):
    return None

def per_call(hook):
    # Best of 5 batches of CPU time per call: the figure least disturbed by other jobs on a shared machine.
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
print(json.dumps({
    "dynamic, following the amax": per_call(LayerHook("l", "fp8", fp8, dynamic=True, warmup_writes=0)) - bare,
    "dynamic, after a warm-up of 10 writes":
        per_call(LayerHook("l", "fp8", fp8, dynamic=True, warmup_writes=10)) - bare,
    "observe (BF16 cache)": per_call(LayerHook("l", "auto", None, **observing)) - bare,
}))
"""


def wrapper_microbench(plugin_src: Path, calls: int = 2000) -> dict[str, float]:
    """CPU µs per wrapped do_kv_cache_update call over a no-op write, on decode-sized tensors, for the production
    path (dynamic scale on a real FP8 E4M3 cache: no emulation). Runs in a child with `plugin_src` first on
    sys.path, so another checkout's hook can be measured by the same harness."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", MICROBENCH, str(calls)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(plugin_src)},
        check=True,
        timeout=600,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _import_root() -> Path:
    import kimi_dflash

    return Path(kimi_dflash.__file__).resolve().parent.parent


@dataclass(kw_only=True)
class HookCostOptions:
    requests: int = option("measured rounds per mode (default 10)", default=10)
    max_tokens: int = option("tokens of the long request (default 520: the CPU clock counts in 10 ms ticks)",
        default=520)  # fmt: skip
    short: int = option("tokens of the short request (default 8)", default=8)
    plugin_src: Path = option("the directory whose kimi_dflash the servers load (default: where this one is "
        "imported from)", default=_import_root())  # fmt: skip
    layers: int = option("MLA layers of the fabricated model (default 4)", default=4)
    modes: str = option(f"comma-separated subset of {', '.join(MODES)}", default=",".join(MODES))

    def check(self) -> None:
        modes = [m for m in self.modes.split(",") if m]
        if "off" not in modes or any(m not in MODES for m in modes):
            raise ValueError(f"--modes must include off and name only {', '.join(MODES)}")


add_cli_args = declare(HookCostOptions, __doc__)


def main(args: HookCostOptions) -> int:
    modes = [m for m in args.modes.split(",") if m]

    from kimi_dflash.core.paths import cache_root
    from kimi_dflash_lab.studies.tiny_mla import ensure_tiny_mla_model

    def say(message: str) -> None:
        print(message, flush=True)

    model = ensure_tiny_mla_model(
        cache_root() / "kvscale" / f"tiny-mla-{args.layers}l-gain1", latent_gain=1.0, num_layers=args.layers
    )
    plugin_src = args.plugin_src.resolve()
    say(f"plugin source: {plugin_src}")
    micro = wrapper_microbench(plugin_src)
    with tempfile.TemporaryDirectory(prefix="kv-hook-cost-") as tmp:
        results = measure_servers(model, modes, args.requests, args.short, args.max_tokens, Path(tmp), plugin_src, say)
    off = next(r for r in results if r.mode == "off")
    print(
        f"\nKV-scale hook cost per decode step, vLLM CPU MLA ({args.layers} MLA layers, 1 sequence, "
        f"{args.requests} rounds of {args.short}+{args.max_tokens} tokens per mode; same run, round-robin; "
        f"plugin {plugin_src}):"
    )
    print(
        f"  {'mode':17s} {'wall ms/step':>12s} {'vs off (paired)':>20s}   {'CPU ms/step':>11s} {'vs off (paired)':>20s}"
    )
    for result in results:
        wall = paired_delta_ms(result, off, "tpot_s")
        cpu = paired_delta_ms(result, off, "cpu_per_token_s")
        print(
            f"  {result.mode:17s} {result.median_ms:12.3f} {wall:+10.3f} ({wall / off.median_ms * 100:+5.1f} %)"
            f"   {result.cpu_median_ms:11.3f} {cpu:+10.3f} ({cpu / off.cpu_median_ms * 100:+5.1f} %)"
        )
    print(
        "the wrapper alone, in-process (CPU µs per call, i.e. per MLA layer per step, over a no-op write; best "
        "of 5 x 2000 calls; production path: dynamic scale, real FP8 E4M3 cache):"
    )
    for name, value in micro.items():
        share = value * args.layers / 1e3 / off.median_ms * 100
        print(f"  {name:40s} {value:7.1f} µs/layer  x {args.layers} layers = {share:4.1f} % of the off step")
    return 0
