"""Preflight: is this machine ready for the launch plan? Printed as pass / warn / fail lines (core/checks.py), each
fail with its fix: vLLM in the serving Python (runtime_probe.py, and the compatibility rules of kimi_dflash.rules
over its source: vllm_check.py), accelerators, NUMA, /dev/shm, checkpoints, pre-shard, port (run.py, in that order).

    request = PreflightRequest(device="rocm", tensor_parallel_size=8, expected_arch="gfx942",
                               deployment=Deployment.for_plan(config, plan, os.environ), ...)
    results = run_preflight(request)
    print(render(results)); sys.exit(exit_code(results))

Standard library only at import time (vLLM is imported in a child process when the checks run).
"""
