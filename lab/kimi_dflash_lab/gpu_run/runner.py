"""`python -m kimi_dflash_lab gpu-run RESULTS_DIR [--part 2]` (lab/gpu/run.sh): the whole recipe on one NVIDIA Hopper
GPU, in two parts of at most 8 and 10 minutes (steps.py says what each does). It says what it will do, prints
progress, and writes everything to RESULTS_DIR: each command's log (logs/), each step's files, run-state.json
(what ran, how long, what failed) and, at the end of part 2, summary.json. Steps a part could not finish carry
over to the next (qualify resumes).

The CPU rehearsal: `--config configs/demo-cpu.env` (or KIMI_GPU_RUN_CONFIG): the same steps against the CPU demo
(GPU-only servers checked with --dry-run), so a typo cannot waste the GPU run.

Exit status: 0 every step of the part done (or carried over to part 2), 1 a step failed (its log is named),
2 bad arguments.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.config.problems import ConfigError
from kimi_dflash.core.options import declare, option, run
from kimi_dflash_lab.gpu_run.context import CHECKOUT, Context, StepFailed, say
from kimi_dflash_lab.gpu_run.steps import Deferred, steps_of

DEFAULT_CONFIG = "configs/demo-gpu.env"
DEFAULT_FP8_CONFIG = "configs/demo-gpu-fp8kv.env"
PART_MINUTES = {1: 8.0, 2: 10.0}
KIT_DIR = CHECKOUT / ".gpu-kit"  # ignored (.git/info/exclude, lab/gpu/prepare.sh): bundle/ travels, site/ is made
STATE = "run-state.json"
REQUIRED = ("kit", "fabricate")  # nothing after them can run if they fail
ALWAYS = (*REQUIRED, "summary")  # run in every part, even when done before (cheap, and the part needs them)


@dataclass(kw_only=True)
class Options:
    results: Path = option("where everything goes (created; reused by --part 2)", positional=True, required=True)
    part: int = option("which part (default 1)", choices=(1, 2), default=1)
    config: str = option(f"the config to serve and qualify (default {DEFAULT_CONFIG}; $KIMI_GPU_RUN_CONFIG; a "
        "DEVICE=cpu config makes it the CPU rehearsal)",
        default=os.environ.get("KIMI_GPU_RUN_CONFIG", DEFAULT_CONFIG))  # fmt: skip
    fp8_config: str = option(f"the FP8-KV config ({DEFAULT_FP8_CONFIG})", default=DEFAULT_FP8_CONFIG)
    minutes: float | None = option("the part's wall-clock budget (8, then 10)")
    python: str = option("the interpreter for the project and vLLM (default $KIMI_PYTHON, else this one)",
        default=os.environ.get("KIMI_PYTHON") or sys.executable)  # fmt: skip
    kit_dir: Path = option(f"bundle/ in, site/ out (default {KIT_DIR})", default=KIT_DIR)


add_cli_args = declare(Options, __doc__)


def config_device(config: str, bundle: Path = KIT_DIR / "bundle") -> str:
    """The config's DEVICE through the project's loader (guarded reader, EXTENDS, the environment, validation):
    ConfigError when it is not a valid config. On a bare GPU host python-dotenv arrives with the kit: the wheel
    in its bundle imports as it is (pure Python)."""
    if importlib.util.find_spec("dotenv") is None:
        sys.path.extend(str(wheel) for wheel in sorted((bundle / "project-whl").glob("python_dotenv-*.whl")))
    from kimi_dflash.config.validate import load_config

    return load_config(CHECKOUT / config).typed.device  # an absolute config stays itself


def load_state(results: Path) -> dict:
    path = results / STATE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"steps": {}, "parts": {}}


def save_state(ctx: Context) -> None:
    (ctx.results / STATE).write_text(json.dumps(ctx.state, indent=1) + "\n", encoding="utf-8")


def main(args: Options) -> int:
    started = time.monotonic()
    try:
        device = config_device(args.config, args.kit_dir / "bundle")
    except ConfigError as error:
        say(f"gpu-run: {args.config} is not a config it can serve; nothing was run:\n{error}")
        return 2
    except ImportError:
        say("gpu-run: python-dotenv is neither installed nor in the kit's bundle: build it with lab/gpu/prepare.sh")
        return 2
    results = args.results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    minutes = args.minutes if args.minutes is not None else PART_MINUTES[args.part]
    ctx = Context(
        results=results,
        config=args.config,
        fp8_config=args.fp8_config,
        gpu=device != "cpu",
        python=args.python,
        site=args.kit_dir.resolve() / "site",
        bundle=args.kit_dir.resolve() / "bundle",
        deadline=started + minutes * 60.0,
        state=load_state(results),
        part=args.part,
    )
    steps = steps_of(args.part)
    mode = "on the GPU" if ctx.gpu else "CPU REHEARSAL (GPU-only servers checked with --dry-run)"
    say(f"gpu-run part {args.part} of 2, {mode}: {args.config} (FP8: {args.fp8_config}), {minutes:g} min budget")
    say(f"  everything goes to {results} (logs/, {STATE}); python {ctx.python}")
    for number, step in enumerate(steps, 1):
        say(f"  {number}. {step.name:<13} {step.title}")
    failed = False
    ctx.state["parts"][str(args.part)] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "device": device}
    try:
        for number, step in enumerate(steps, 1):
            record = ctx.state["steps"].get(step.name, {})
            if record.get("status") == "done" and step.name not in ALWAYS:
                say(f"[{number}/{len(steps)}] {step.name}: done in part {record.get('part')}, kept")
                continue
            if ctx.remaining() < 30:
                ctx.state["steps"][step.name] = {**record, "status": "not run", "detail": "out of time in this part"}
                say(f"[{number}/{len(steps)}] {step.name}: not run, out of time ({minutes:g} min)")
                continue
            say(f"[{number}/{len(steps)}] {step.name}: {step.title} ({ctx.remaining():.0f} s left)")
            step_started = time.monotonic()
            try:
                detail = step.run(ctx)
                status = "done"
            except Deferred as deferred:
                detail, status = {"why": str(deferred)}, "carried over"
            except StepFailed as error:
                detail, status, failed = {"error": str(error)}, "failed", True
            seconds = round(time.monotonic() - step_started, 1)
            ctx.state["steps"][step.name] = {"status": status, "part": args.part, "seconds": seconds, "detail": detail}
            save_state(ctx)
            say(f"    -> {status} in {seconds} s" + (f": {detail['error']}" if status == "failed" else ""))
            if status == "failed" and step.name in REQUIRED:
                say("gpu-run: the steps after it need it; stopping this part")
                break
    finally:
        ctx.stop_kept()
        ctx.state["parts"][str(args.part)]["seconds"] = round(time.monotonic() - started, 1)
        save_state(ctx)
    say(f"gpu-run part {args.part}: {'a step FAILED' if failed else 'done'} in {time.monotonic() - started:.0f} s; "
        f"{results / STATE}")  # fmt: skip
    if args.part == 1 and not failed:
        say(f"next: lab/gpu/run.sh {args.results} --part 2")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab gpu-run"))
