"""``python -m kimi_dflash_lab COMMAND [options]``: the lab's commands (each module's own --help; every command is
``add_cli_args`` + ``main(args)``, started through ``kimi_dflash.core.options.run`` as the product's verbs are)."""

from __future__ import annotations

import sys

from kimi_dflash.core import options
from kimi_dflash_lab import use_test_helpers

COMMANDS: dict[str, tuple[str, str]] = {  # command -> (module, one-line help)
    "dry-engine": ("kimi_dflash_lab.dry_engine.cli", "vLLM's own start-up code on a config's plan"),
    "dry-engine-venv": ("kimi_dflash_lab.dry_engine.venv", "a venv with a vLLM release's CUDA wheel (downloads GB)"),
    "dry-engine-release": ("kimi_dflash_lab.dry_engine.release_run", "the dry engine on the GPU configs, one release"),
    "docs": ("kimi_dflash_lab.docgen.cli", "regenerate the generated docs: config reference, result schema, results"),
    "matrix": ("kimi_dflash_lab.matrix", "the compatibility matrix for the docs (downloads wheels)"),
    "synthetic": ("synthetic_server.cli", "the synthetic OpenAI server (tests/synthetic_server)"),
    "capacity": ("kimi_dflash_lab.studies.capacity", "client capacity vs vllm bench serve"),
    "crosscheck": ("kimi_dflash_lab.studies.crosscheck", "the benchmark against vllm bench serve, same server"),
    "kv-hook-cost": ("kimi_dflash_lab.studies.kv_hook_cost", "the FP8 KV-scale hook's cost in vLLM CPU servers"),
    "kv-hook-graph": ("kimi_dflash_lab.studies.kv_hook_graph", "the KV-scale hook eager vs a CUDA graph (GPU)"),
    "tiny-mla": ("kimi_dflash_lab.studies.tiny_mla", "fabricate the tiny random MLA checkpoint"),
    "demo-startup": ("kimi_dflash_lab.studies.demo_startup", "start-up time of the CPU demo, variants interleaved"),
    "advisor-check": ("kimi_dflash_lab.studies.advisor_check", "the advisor's accuracy on held-out k"),
    "open-loop-overhead": ("kimi_dflash_lab.studies.open_loop_overhead", "the open-loop scheduler's send lag"),
    "drafter-rope": ("kimi_dflash_lab.studies.drafter_rope", "yarn drafters' acceptance per DRAFTER_ROPE_AMPLITUDE"),
    "drafter-acceptance": (
        "kimi_dflash_lab.studies.drafter_acceptance",
        "acceptance per position, drafters side by side",
    ),
    "kernel-check": ("kimi_dflash_lab.kernel_check", "the patched Triton kernel against a PyTorch reference (CPU)"),
    "demo-vllm-check": ("kimi_dflash_lab.demo_vllm_check", "the demo models in vLLM's model classes"),
    "demo-reference": ("kimi_dflash_lab.demo_reference", "demo drafter/target agreement without vLLM"),
    "gpu-run": ("kimi_dflash_lab.gpu_run.runner", "the whole recipe on one Hopper GPU (lab/gpu/run.sh)"),
    "gpu-prepare": ("kimi_dflash_lab.gpu_run.prepare", "build the GPU kit bundle into .gpu-kit/ (downloads)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "usage: python -m kimi_dflash_lab COMMAND [options]\n\ncommands:\n" + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        sys.stderr.write(f"unknown command {argv[0]!r}\n" + usage())
        return 2
    module, text = COMMANDS[argv[0]]
    use_test_helpers()  # the synthetic server's command is a tests/ helper module
    return options.run(module, argv[1:], prog=f"python -m kimi_dflash_lab {argv[0]}", description=text)


if __name__ == "__main__":
    sys.exit(main())
