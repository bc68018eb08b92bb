"""`kimi-dflash preflight`: the checks without a config file (`kimi-dflash serve CONFIG --preflight` builds the
same request from a config)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.checks import exit_code, render
from kimi_dflash.core.options import DEFAULT_PORT, PORT, declare, fields_of, option
from kimi_dflash.preflight.request import DEFAULT_MIN_SHM_BYTES, GIB, Device, PreflightRequest
from kimi_dflash.preflight.run import run_preflight
from kimi_dflash.preflight.runtime_probe import interpreter_for_command
from kimi_dflash.rules.deployment import Deployment, features_from_command
from kimi_dflash.rules.features import GRAMMAR, parse_feature

EPILOG = f"""\
checks, in order:
  vllm              imports in the Python that runs vLLM; build, version; each feature read from its source;
                    with a trailing command line, the compatibility rules (options, speculative-config keys,
                    VLLM_* variables, MoE backend vs the checkpoint's quantisation, KV dtype vs the MLA
                    backends, patches) and whether the kimi_dflash vLLM plugin loads when the plan needs it
  accelerators      count (amd-smi, rocm-smi, nvidia-smi, else torch) against --tensor-parallel-size,
                    architecture against --arch, and that torch in this Python sees them
  numa balancing    /proc/sys/kernel/numa_balancing must be 0 on GPUs (--fix-numa sets it, as root)
  /dev/shm          size against --min-shm-gib (GPU default {DEFAULT_MIN_SHM_BYTES["rocm"] // GIB} GiB)
  model/drafter dir config.json parses; every shard in model.safetensors.index.json present and non-empty
  port              --host:--port can be bound

feature names: {GRAMMAR}

examples:
  kimi-dflash preflight --device rocm --tensor-parallel-size 8 --arch gfx942 \\
      --model-dir /models/Kimi-K2.6 --model-repo moonshotai/Kimi-K2.6 \\
      --feature speculative_method:dflash --feature speculative_config.attention_backend
  kimi-dflash preflight --device cpu --port 8262
  kimi-dflash preflight --device rocm --tensor-parallel-size 8 --arch gfx942 -- \\
      vllm serve /models/Kimi-K2.6 --moe-backend aiter --speculative-config '{{"method":"dflash",...}}'

exit status: 0 no check failed (warnings allowed), 1 a check failed, 2 bad arguments."""


def _feature(text: str) -> str:
    parse_feature(text)  # a ValueError naming the grammar
    return text


@dataclass(kw_only=True)
class PreflightOptions:
    device: Device = option("rocm (MI300X), cuda (H200) or cpu (demo)", required=True)
    tensor_parallel_size: int = option("GPUs the plan needs", default=1, minimum=1, metavar="N")
    expected_arch: str | None = option("expected GPU architecture: gfx942, sm_90, ...", flag="--arch", metavar="ARCH")
    model_dir: Path | None = option("target checkpoint directory", metavar="DIR")
    model_repo_hint: str | None = option("its Hugging Face repo id (download fix)", flag="--model-repo", metavar="REPO")
    draft_model_dir: Path | None = option("drafter checkpoint directory", metavar="DIR")
    draft_repo_hint: str | None = option("its Hugging Face repo id (download fix)", flag="--draft-repo", metavar="REPO")
    host: str = option("address the server will bind (default %(default)s)", default="127.0.0.1")
    port: int = option("port the server will bind (default %(default)s)", default=DEFAULT_PORT, **PORT)
    feature: list[str] = option(
        "a vLLM feature the plan needs (repeatable); grammar below", repeatable=True, metavar="NAME", parse=_feature
    )
    fix_numa: bool = option("as root, set kernel.numa_balancing=0 if it is on")
    min_shm_gib: float | None = option("/dev/shm size to require", metavar="GIB")
    command: list[str] = option(
        "optional: the vLLM command line that will run, its options and Python checked too",
        positional=True,
        nargs=argparse.REMAINDER,
        metavar="-- vllm serve ...",
    )


add_cli_args = declare(
    PreflightOptions,
    "Check that this machine can serve the plan: prints [PASS]/[WARN]/[FAIL] lines, each failure with the command "
    "or setting that fixes it.",
    EPILOG,
)


def main(args: PreflightOptions) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    features = tuple(dict.fromkeys([*args.feature, *(features_from_command(command) if command else ())]))
    deployment = None
    if command:
        model, drafter = (args.model_dir, args.model_repo_hint), (args.draft_model_dir, args.draft_repo_hint)
        deployment = Deployment.from_command(args.device, command, os.environ, model=model, drafter=drafter)
    # The options named as the request's fields pass as they are.
    given = {field.name: getattr(args, field.name) for field, _ in fields_of(PreflightOptions)}
    try:
        request = PreflightRequest(
            **{name: value for name, value in given.items() if name in PreflightRequest.__dataclass_fields__},
            required_features=features,
            min_shm_bytes=None if args.min_shm_gib is None else int(args.min_shm_gib * GIB),
            python=interpreter_for_command(command) if command else None,
            deployment=deployment,
        )
    except ValueError as error:
        print(f"preflight: error: {error}", file=sys.stderr)
        return 2
    results = run_preflight(request)
    print(render(results))
    return exit_code(results)
