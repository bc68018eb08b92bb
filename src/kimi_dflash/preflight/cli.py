"""`python -m kimi_dflash.preflight`: the checks without a config file (serve.sh CONFIG --preflight builds the
same request from a config)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kimi_dflash.core.checks import exit_code, render
from kimi_dflash.preflight.request import DEVICES, GIB, PreflightRequest, default_min_shm_bytes
from kimi_dflash.preflight.run import run_preflight
from kimi_dflash.preflight.runtime_probe import interpreter_for_command
from kimi_dflash.rules.deployment import Deployment, features_from_command
from kimi_dflash.rules.features import GRAMMAR

EPILOG = f"""\
checks, in order:
  vllm              imports in the Python that runs vLLM; build, version; each feature read from its source;
                    with a trailing command line, the compatibility rules (options, speculative-config keys,
                    VLLM_* variables, MoE backend vs the checkpoint's quantisation, KV dtype vs the MLA
                    backends, patches) and whether the kimi_dflash vLLM plugin loads when the plan needs it
  accelerators      count (amd-smi, rocm-smi, nvidia-smi, else torch) against --tensor-parallel-size,
                    architecture against --arch, and that torch in this Python sees them
  numa balancing    /proc/sys/kernel/numa_balancing must be 0 on GPUs (--fix-numa sets it, as root)
  /dev/shm          size against --min-shm-gib (GPU default {default_min_shm_bytes("rocm") // GIB} GiB)
  model/drafter dir config.json parses; every shard in model.safetensors.index.json present and non-empty
  port              --host:--port can be bound

feature names: {GRAMMAR}

examples:
  python -m kimi_dflash.preflight --device rocm --tensor-parallel-size 8 --arch gfx942 \\
      --model-dir /models/Kimi-K2.6 --model-repo moonshotai/Kimi-K2.6 \\
      --feature speculative_method:dflash --feature speculative_config.attention_backend
  python -m kimi_dflash.preflight --device cpu --port 8262
  python -m kimi_dflash.preflight --device rocm --tensor-parallel-size 8 --arch gfx942 -- \\
      vllm serve /models/Kimi-K2.6 --moe-backend aiter --speculative-config '{{"method":"dflash",...}}'

exit status: 0 no check failed (warnings allowed), 1 a check failed, 2 bad arguments."""


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog or "python -m kimi_dflash.preflight",
        description="Check that this machine can serve the plan: prints [PASS]/[WARN]/[FAIL] lines, each "
        "failure with the command or setting that fixes it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", choices=DEVICES, required=True, help="rocm (MI300X), cuda (H200) or cpu (demo)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N", help="GPUs the plan needs")
    parser.add_argument("--arch", metavar="ARCH", help="expected accelerator architecture: gfx942, sm_90, ...")
    parser.add_argument("--model-dir", type=Path, metavar="DIR", help="target checkpoint directory")
    parser.add_argument("--model-repo", metavar="REPO", help="its Hugging Face repo id (for the download fix)")
    parser.add_argument("--draft-model-dir", type=Path, metavar="DIR", help="drafter checkpoint directory")
    parser.add_argument("--draft-repo", metavar="REPO", help="its Hugging Face repo id (for the download fix)")
    parser.add_argument("--host", default="127.0.0.1", help="address the server will bind (default %(default)s)")
    parser.add_argument("--port", type=int, default=8262, help="port the server will bind (default %(default)s)")
    parser.add_argument(
        "--feature",
        action="append",
        default=[],
        metavar="NAME",
        help="a vLLM feature the plan needs (repeatable); grammar below",
    )
    parser.add_argument("--fix-numa", action="store_true", help="as root, set kernel.numa_balancing=0 if it is on")
    parser.add_argument("--min-shm-gib", type=float, metavar="GIB", help="/dev/shm size to require")
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- vllm serve ...",
        help="optional: the vLLM command line that will run; every option it passes (and the "
        "Python it runs in) is checked too",
    )
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.tensor_parallel_size < 1:
        parser.error("--tensor-parallel-size must be at least 1")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    features = tuple(dict.fromkeys([*args.feature, *(features_from_command(command) if command else ())]))
    deployment = None
    if command:
        deployment = Deployment.from_command(
            args.device,
            command,
            os.environ,
            model=(args.model_dir, args.model_repo),
            drafter=(args.draft_model_dir, args.draft_repo),
        )
    try:
        request = PreflightRequest(
            device=args.device,
            tensor_parallel_size=args.tensor_parallel_size,
            expected_arch=args.arch,
            model_dir=args.model_dir,
            model_repo_hint=args.model_repo,
            draft_model_dir=args.draft_model_dir,
            draft_repo_hint=args.draft_repo,
            host=args.host,
            port=args.port,
            required_features=features,
            fix_numa=args.fix_numa,
            min_shm_bytes=None if args.min_shm_gib is None else int(args.min_shm_gib * GIB),
            python=interpreter_for_command(command) if command else None,
            deployment=deployment,
        )
    except ValueError as error:
        parser.error(str(error))
    results = run_preflight(request)
    print(render(results))
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
