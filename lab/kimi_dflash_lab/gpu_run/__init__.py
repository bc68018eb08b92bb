"""The whole recipe on one NVIDIA Hopper GPU, as one command (lab/gpu/run.sh RESULTS_DIR [--part 2]).

- ``prepare``: builds the offline vLLM 0.26.0 bundle (the project's GPU kit, shared/tools/gpu-kit) into an ignored
  folder of the checkout, which travels to the GPU host with it.
- ``steps``: what the run does, step by step (the command lines, pure).
- ``runner``: runs the steps of a part, each under the part's deadline, everything written to RESULTS_DIR.

On a CPU machine the same steps run against the CPU demo (``--config configs/demo-cpu.env``): every command line
that the GPU run will execute is executed (or, for the GPU-only servers, checked with ``--dry-run``), so a typo
cannot waste the GPU run (lab/tests/test_gpu_run.py).
"""
