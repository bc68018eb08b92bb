"""Preflight: is this machine ready for the launch plan? `run_preflight(PreflightRequest(...))` returns pass / warn /
fail lines (core/checks.py), each fail with its fix. Standard library only at import time (vLLM: a child process)."""
