"""Sweep launcher: a grid of server configurations x benchmark concurrency levels, one result file per point, on
the resumable run of runs/ (docs/workflows.md)."""
