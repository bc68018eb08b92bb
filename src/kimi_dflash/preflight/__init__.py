"""Preflight: is this machine ready for the launch plan? `run_preflight(PreflightRequest(...))` returns pass / warn /
fail lines (core/checks.py), each fail with its fix: vLLM in the serving Python (judged by kimi_dflash.rules over its
source), accelerators, NUMA, /dev/shm, checkpoints, pre-shard, port. Standard library only at import time (vLLM is
imported in a child process when the checks run)."""
