"""payload/preshard_kimi26.py: write a checkpoint pre-split for one tensor-parallel size (see --help)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kimi_dflash.core import options
from kimi_dflash.core.atomic_write import publish_directory, write_text_atomic
from kimi_dflash.core.options import option
from kimi_dflash.preflight.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    checkpoint_fingerprint,
    mismatches,
    rank_files,
    read_manifest,
    write_manifest,
)

if TYPE_CHECKING:
    from kimi_dflash.config.validate import Config

PROGRESS_NAME = "preshard-progress.json"
EXIT_USAGE = 2

DESCRIPTION = """\
Pre-shard the target checkpoint a config serves for that config's tensor-parallel size, in vLLM's sharded_state
format: one set of safetensors per rank holding exactly that rank's slice of every weight, as vLLM keeps it in
memory. A server started with --load-format sharded_state reads only its own slice, which is what makes a TP 8
load of a 555 GB checkpoint fast.

The output is finished only when it holds kimi-dflash-preshard.json (source fingerprint, TP size, vLLM version,
dtype, shard sizes): everything is staged in OUTPUT.partial and renamed into place last, and running the same
command again resumes from the last completed step (the tokenizer/config files, the shards).

Serve it with PRESHARD_DIR=OUTPUT in the config (or the environment): serve.sh passes --load-format sharded_state,
and preflight refuses a pre-shard made for another TP size, vLLM version, dtype or checkpoint. Re-run this after
upgrading vLLM.
"""

EPILOG = """\
examples:
  payload/preshard_kimi26.py configs/production.env --output /models/kimi-k2.6-tp8
  payload/preshard_kimi26.py configs/demo-cpu.env --output /tmp/demo-preshard      (the CPU demo, ~1 minute)
  PRESHARD_DIR=/tmp/demo-preshard ./serve.sh configs/demo-cpu.env --wait

needs: the vLLM that will serve (same version), and the accelerators of the TP size (vLLM loads the model once).
"""


def say(message: str) -> None:
    print(f"preshard: {message}", file=sys.stderr, flush=True)


@dataclass(kw_only=True)
class PreshardOptions:
    config: Path = option("the config that will serve it (MODEL_DIR, TP size, DTYPE)", positional=True, required=True)
    output: Path = option("directory to create (unless it is a finished pre-shard of the same source)", required=True)
    max_shard_gib: float = option("largest safetensors file per rank, GiB (default 5)", default=5.0, above=0)
    force: bool = option("replace an existing OUTPUT that was made from another checkpoint, TP size or vLLM")


add_cli_args = options.declare(PreshardOptions, DESCRIPTION, EPILOG)


def main(args: PreshardOptions) -> int:
    from kimi_dflash.config.validate import ConfigError, load_config
    from kimi_dflash.launch.cli import report_problems
    from kimi_dflash.launch.prepare import resolve_demo_models

    try:
        config = resolve_demo_models(load_config(args.config), create=True)
    except ConfigError as error:
        report_problems(error.problems)
        return EXIT_USAGE
    if config.typed.preshard_dir is not None:
        say(f"{args.config} already serves a pre-shard (PRESHARD_DIR); pre-shard from a config without it")
        return EXIT_USAGE
    source = Path(str(config.typed.model_dir))
    output = args.output.resolve()
    try:
        return run(config, source, output, args)
    except (ManifestError, OSError) as error:
        say(str(error))
        return 1


def run(config: Config, source: Path, output: Path, args: PreshardOptions) -> int:
    from kimi_dflash.preflight.runtime_child import installed_vllm

    tp = config.typed.tensor_parallel_size if config.typed.device != "cpu" else 1
    distribution, version = installed_vllm()
    if version is None:
        say("vLLM is not installed in this Python; run with the interpreter that serves")
        return 1
    dtype = config.typed.dtype
    say(f"fingerprinting {source}")
    key = dict(
        source_fingerprint=checkpoint_fingerprint(source), tensor_parallel_size=tp, vllm_version=version, dtype=dtype
    )
    if (output / MANIFEST_NAME).is_file():
        problems = mismatches(
            read_manifest(output), output, source_dir=source, tensor_parallel_size=tp, vllm_version=version, dtype=dtype
        )
        if not problems:
            say(f"{output} is already a finished pre-shard of this checkpoint for TP {tp}, vLLM {version}")
            return 0
        if not args.force:
            say(f"{output} is a pre-shard of something else ({'; '.join(problems)}); pass --force to replace it")
            return 1
    elif output.exists():
        say(f"{output} exists and is not a finished pre-shard; remove it or choose another --output")
        return 1

    staging = output.with_name(output.name + ".partial")
    steps = _resume(staging, key)
    if "copied" not in steps:
        say("copying config, tokenizer and other non-weight files")
        # The weight index maps the original tensor names to files; the pre-shard has its own layout.
        ignore = shutil.ignore_patterns("*.safetensors", "*.bin", "*.pt", "*.index.json", ".cache")
        shutil.copytree(source, staging, ignore=ignore, dirs_exist_ok=True)
        steps = _mark(staging, key, steps, "copied")
    if "saved" not in steps:
        for stale in staging.glob("model-rank-*.safetensors"):
            stale.unlink()  # a save interrupted mid-way: start the save over
        say(f"loading {source} in vLLM {version} (TP {tp}, {dtype}) and saving each rank's state; vLLM's log follows")
        started = time.monotonic()
        if not _save_in_child(config, source, staging, tp, int(args.max_shard_gib * (1 << 30))):
            say(f"vLLM failed (see its log above); {staging} is kept, run the same command to retry")
            return 1
        say(f"saved in {time.monotonic() - started:.1f} s")
        steps = _mark(staging, key, steps, "saved")

    files: dict[str, int] = {}
    for rank in range(tp):
        found = rank_files(staging, rank)
        if not found:
            say(f"vLLM wrote no shard for rank {rank} in {staging}; re-run to save again")
            _mark(staging, key, [s for s in steps if s != "saved"], None)
            return 1
        files.update({path.name: path.stat().st_size for path in found})
    write_manifest(staging, Manifest(source_dir=str(source), vllm_distribution=str(distribution), files=files, **key))
    (staging / PROGRESS_NAME).unlink()
    for path in staging.iterdir():  # readable by the serving user (safetensors and mkstemp write 0600)
        if path.is_file():
            path.chmod(0o644)
    publish_directory(staging, output)  # an old output (--force) is moved aside first, then removed
    total = sum(files.values()) / (1 << 30)
    say(f"done: {output} ({len(files)} shard files, {total:.2f} GiB, TP {tp}); serve it with PRESHARD_DIR={output}")
    return 0


def _resume(staging: Path, key: dict[str, object]) -> list[str]:
    """Steps already done in `staging` for this same key; a staging dir of another source is started over."""
    progress = staging / PROGRESS_NAME
    if progress.is_file():
        recorded = json.loads(progress.read_text(encoding="utf-8"))
        if recorded.get("key") == key:
            say(f"resuming {staging} (done: {', '.join(recorded['steps']) or 'nothing'})")
            return list(recorded["steps"])
        say(f"{staging} was started for another source, TP size or vLLM: starting over")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    _mark(staging, key, [], None)
    return []


def _mark(staging: Path, key: dict[str, object], steps: list[str], done: str | None) -> list[str]:
    steps = [*steps, done] if done else list(steps)
    write_text_atomic(staging / PROGRESS_NAME, json.dumps({"key": key, "steps": steps}))
    return steps


def _engine_args(config: Config, tp: int) -> dict[str, object]:
    args: dict[str, object] = {
        "tensor_parallel_size": tp,
        "enforce_eager": True,
        "trust_remote_code": bool(config.typed.trust_remote_code),
        # The KV cache is irrelevant here: the smallest that lets the engine start.
        "max_model_len": min(config.typed.max_model_len, 4096),
        "max_num_seqs": 1,
        "language_model_only": bool(config.typed.language_model_only),
    }
    if config.typed.dtype != "auto":
        args["dtype"] = config.typed.dtype
    if config.typed.device != "cpu":
        args["gpu_memory_utilization"] = float(config.typed.gpu_memory_utilization)
    return args


def _save_in_child(config: Config, source: Path, staging: Path, tp: int, max_size: int) -> bool:
    from kimi_dflash.core.paths import cache_root
    from kimi_dflash.launch.prepare import cpu_preload
    from kimi_dflash.plan import vllm_env

    env = {**os.environ, **vllm_env(config, str(cache_root()), cpu_preload(config), environ=os.environ)}
    env.pop("VLLM_API_KEY", None)
    request = dict(model=str(source), output=str(staging), max_size=max_size, engine_args=_engine_args(config, tp))
    child = [sys.executable, "-m", "kimi_dflash.preshard.save_child", json.dumps(request)]
    return subprocess.run(child, env=env, check=False).returncode == 0
