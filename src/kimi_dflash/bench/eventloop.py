"""Run the benchmark's event loop as cheaply as the client box allows: how many streams one client core follows
without distorting timestamps depends on it.

* uvloop, when installed (optional; the result records which loop ran), roughly halves the per-read cost.
* asyncio's socket transport calls ``recv(256 KiB)`` for every read; with glibc that allocation is above the
  mmap/trim thresholds, so each SSE chunk cost ~20 us of allocation and page mapping on the 2-core dev box
  against ~3 us for 64 KiB. SSE reads are a few hundred bytes: the benchmark lowers the read size to 64 KiB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

READ_SIZE = 64 * 1024


def tune_default_transport() -> bool:
    """Lower asyncio's per-read buffer for this process. Returns False where the knob does not exist."""
    try:
        from asyncio import selector_events

        transport = selector_events._SelectorSocketTransport  # private, on purpose: see the module docstring
    except (ImportError, AttributeError):
        return False
    if not isinstance(getattr(transport, "max_size", None), int):
        return False
    transport.max_size = READ_SIZE
    return True


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
    tune_default_transport()
    return asyncio.run(coro)
