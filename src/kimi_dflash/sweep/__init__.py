"""Sweep launcher: a grid of server configurations x benchmark concurrency levels, one result file per point.

grid       --grid KEY=v1,v2 parsing, the points and their server environment (pure)
state      which points are finished, failed or interrupted in an output directory
runner     start each point with serve.sh --wait, benchmark it, stop it; resumable, with ETA
aggregate  the markdown table at matched concurrency and the plots
cli        launchers/kimi26-vllm-dflash-sweep.sh (python -m kimi_dflash.sweep)
"""
