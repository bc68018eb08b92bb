"""Sweep launcher: server configurations x concurrency levels, one result per point, resumable (docs/workflows.md)."""
