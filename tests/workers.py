"""Each pytest-xdist worker's share of the cores (a fixtures module: both conftests call it)."""

import os


def share_the_cores() -> None:
    """In a worker of N, torch's OpenMP pool (and a child process's) gets cores / N threads, not every core: N pools
    of all the cores spin against each other (the torch tests ran 1.6x slower on 2 cores with 2 workers)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // workers))
