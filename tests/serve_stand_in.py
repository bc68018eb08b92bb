"""A stand-in for serve.sh for the sweep and qualify tests (their hidden --serve-sh): no vLLM, the instrument
server in its place (a fixtures module: test files import it, never each other)."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from synthetic_server import environ as synthetic_environ

STAND_IN_SERVE = """#!/usr/bin/env bash
# --wait: notes "$PORT $NUM_SPECULATIVE_TOKENS" in $STAND_IN_DIR/started; while $STAND_IN_DIR/hold exists it waits
# (a run caught in the middle of a server start); then starts the instrument server (vLLM's endpoints) on $PORT and
# returns once it listens. --stop: notes $PORT in $STAND_IN_DIR/stops; with STAND_IN_REFUSE_STOP set it refuses, as
# serve.sh does when the pid file does not prove the server is ours (exit 1, the server stays up); else stops it.
dir="$STAND_IN_DIR"; pidfile="$dir/server-$PORT.pid"
if [[ " $* " == *" --wait "* ]]; then
  args=("$@"); log="${args[-1]}"
  echo "$PORT ${NUM_SPECULATIVE_TOKENS:-}" >> "$dir/started"
  while [[ -f "$dir/hold" ]]; do sleep 0.1; done
  : > "$log"
  "$KIMI_PYTHON" -m synthetic_server --port "$PORT" --ttft-ms 5 --chunk-interval-ms 1 \\
    --chunk-tokens 2,1 --spec-tokens "${NUM_SPECULATIVE_TOKENS:-0}" >> "$log" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 300); do grep -q "listening on" "$log" && exit 0; sleep 0.1; done
  exit 1
fi
echo "$PORT" >> "$dir/stops"
if [[ -n "${STAND_IN_REFUSE_STOP:-}" ]]; then
  echo "serve: refusing to signal anything: the pid file $pidfile is not a server record" >&2
  exit 1
fi
[[ -f "$pidfile" ]] && kill "$(cat "$pidfile")" && rm -f "$pidfile"
exit 0
"""


def stand_in(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in serve.sh, keeping its notes in ``directory`` (set for this test's processes)."""
    directory.mkdir(parents=True, exist_ok=True)
    serve = directory / "serve.sh"
    serve.write_text(STAND_IN_SERVE)
    serve.chmod(0o755)
    monkeypatch.setenv("STAND_IN_DIR", str(directory))
    monkeypatch.setenv("PYTHONPATH", synthetic_environ()["PYTHONPATH"])  # the instrument server is a tests/ helper
    return serve


def notes(directory: Path, name: str) -> list[str]:
    """The lines the stand-in noted in ``started`` or ``stops`` (none when it never did)."""
    path = directory / name
    return path.read_text().splitlines() if path.is_file() else []


def serving(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def kill_servers(directory: Path) -> None:
    """Stop every instrument server the stand-in left up (its refused stops leave them running)."""
    for pidfile in directory.glob("server-*.pid"):
        try:
            os.kill(int(pidfile.read_text()), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass
        pidfile.unlink()


def wait_for(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
