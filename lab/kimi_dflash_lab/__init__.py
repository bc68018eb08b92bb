"""The lab: what checks the product, kept apart from it (never imported by ``kimi_dflash``).

- ``dry_engine``: vLLM's own start-up code on a plan, on a simulated platform off the plan's GPU (CI's oracle for
  the compatibility rules; ``python -m kimi_dflash_lab dry-engine CONFIG``).
- ``matrix``: the compatibility matrix of every shipped config x every vLLM release, for the docs.
- ``synthetic``: the command of the synthetic OpenAI server with exact timing and injected faults (the benchmark's
  test double: ``tests/synthetic_server``, a helper of the product's tests that the studies drive too).
- ``studies``: client capacity, the cross-check against ``vllm bench serve``, the KV-scale hook's cost (CPU
  servers, and eager vs a captured graph on a GPU), the tiny MLA fabricator, demo start-up time, the advisor's
  held-out accuracy, the open-loop scheduler's lag (``benchmarks/*.py`` are thin entry points onto them).
- ``wheels``: vLLM releases' Python sources read off the package index by range requests (the matrix's and the
  wheel-reading tests' source); ``kernel_check``: the patched Triton kernel against a PyTorch reference.
- ``demo_vllm_check``: the demo models loaded into vLLM's own model classes, every weight where it belongs;
  ``demo_reference``: the demo drafters' agreement with their targets without vLLM (transformers + a transcription
  of vLLM's DFlash forward); ``yarn_drafter``: two drafters built for RoPE amplitude 1.4159 or 1.0 that check
  DRAFTER_ROPE_AMPLITUDE (the drafter-rope study serves them).
- ``gpu_run``: the whole recipe on one NVIDIA Hopper GPU as one command (``lab/gpu/run.sh``), rehearsed on the CPU
  demo; ``dry_engine.venv`` / ``dry_engine.release_run``: the dry engine with a vLLM release's CUDA wheel.

Arrows point one way: the lab imports the product and may need vLLM, torch or transformers; the product's
wheel carries none of it. ``python -m kimi_dflash_lab --help`` lists the commands.
"""

from pathlib import Path

LAB_ROOT = Path(__file__).resolve().parent.parent  # the directory that holds this package (on PYTHONPATH)
TEST_HELPERS = LAB_ROOT.parent / "tests"  # the product tests' helper modules (synthetic_server among them)


def use_test_helpers() -> None:
    """Let the lab import the product tests' helper modules (the synthetic server): tests/ last on sys.path, so
    nothing there shadows an installed module. The product's tests never import the lab; the lab may use theirs."""
    import sys

    if str(TEST_HELPERS) not in sys.path:
        sys.path.append(str(TEST_HELPERS))


def lab_environ(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment whose Python finds this package (for the lab's child processes): LAB_ROOT first on
    PYTHONPATH."""
    import os

    environ = dict(os.environ if base is None else base)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(LAB_ROOT), environ.get("PYTHONPATH"))))
    return environ
