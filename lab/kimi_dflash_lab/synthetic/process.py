"""Start the synthetic server in its own process (so it does not share the client's core)."""

from __future__ import annotations

import contextlib
import select
import subprocess
import sys
from collections.abc import Iterator

MODULE = "kimi_dflash_lab.synthetic"
READY_PREFIX = "listening on "


@contextlib.contextmanager
def running(args: list[str], python: str = sys.executable, startup_timeout_s: float = 20.0) -> Iterator[str]:
    """Run ``python -m kimi_dflash_lab.synthetic --port 0 ARGS``; yield its base URL.

    Used by the tests and the client-capacity study. The process is always stopped on exit.
    """
    from kimi_dflash_lab import lab_environ

    process = subprocess.Popen(
        [python, "-m", MODULE, "--port", "0", *args],
        env=lab_environ(),
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
