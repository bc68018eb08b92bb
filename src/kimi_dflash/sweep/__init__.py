"""Sweep launcher: a grid of server configurations x benchmark concurrency levels, one result file per point.

grid       --grid KEY=v1,v2 parsing, the points and their server environment (pure)
state      the output directory: each point's result or failure record, the run's state (sweep.json)
points     a point as a unit of the resumable run (runs/): serve it (launch.serve_sh), benchmark it, stop it
aggregate  the markdown table at matched concurrency and the plots
cli        launchers/kimi26-vllm-dflash-sweep.sh (python -m kimi_dflash.sweep)
"""
