"""uvloop if installed, else asyncio with 64 KiB reads (docs/benchmark.md, "How the client keeps out of the way")."""

from __future__ import annotations

import asyncio
from asyncio import selector_events
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

READ_SIZE = 64 * 1024


def loop_name(prefer_uvloop: bool) -> str:
    if prefer_uvloop:
        try:
            import uvloop  # noqa: F401

            return "uvloop"
        except ImportError:
            pass
    return "asyncio"


def run(coro: Coroutine[Any, Any, T], prefer_uvloop: bool = True) -> T:
    """asyncio.run with uvloop when available and wanted, else the tuned default loop."""
    if loop_name(prefer_uvloop) == "uvloop":
        import uvloop

        return uvloop.run(coro)
    # Lower asyncio's per-read buffer for this process (private, on purpose: see the module docstring).
    transport = getattr(selector_events, "_SelectorSocketTransport", None)
    if isinstance(getattr(transport, "max_size", None), int):
        transport.max_size = READ_SIZE  # type: ignore[union-attr]
    return asyncio.run(coro)
