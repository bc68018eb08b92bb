"""Start the synthetic server in its own process (so it does not share the client's core)."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

MODULE = "synthetic_server"
READY_PREFIX = "listening on "
TESTS_DIR = Path(__file__).resolve().parents[1]  # the directory that holds this package


def environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment whose Python finds this package and the checkout's product (the command line is declared
    with kimi_dflash.core.options): both first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    paths = [str(TESTS_DIR), str(TESTS_DIR.parent / "src")]
    env["PYTHONPATH"] = os.pathsep.join([*paths, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)])
    return env


@contextlib.contextmanager
def running(args: list[str], python: str = sys.executable, startup_timeout_s: float = 20.0) -> Iterator[str]:
    """Run ``python -m synthetic_server --port 0 ARGS``; yield its base URL.

    Used by the tests and the lab's client-capacity and open-loop studies. The process is always stopped on exit.
    """
    process = subprocess.Popen(
        [python, "-m", MODULE, "--port", "0", *args],
        env=environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], startup_timeout_s)
        line = process.stdout.readline() if ready else ""
        if not line.startswith(READY_PREFIX):
            process.kill()
            _, err = process.communicate(timeout=10)
            raise RuntimeError(f"synthetic server did not start: {line!r} {err.strip()[-2000:]}")
        yield line.split()[-1]
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
