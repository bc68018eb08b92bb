"""File descriptors: enough before a run starts, and a local shortage never blamed on the server."""

from __future__ import annotations

import errno

from kimi_dflash.core.errors import UserError

RESERVE = 64  # descriptors besides the sessions' connections: stdio, the loop, the GET session, file writes

# What failing with these means: this machine ran out of something (descriptors, local ports, buffers, memory).
LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EADDRNOTAVAIL})


def ensure(connections: int, what: str) -> str | None:
    """Make room for ``connections``: a note when the soft limit was raised, UserError when the hard one is too low."""
    try:
        import resource
    except ImportError:  # not POSIX: no such limit to check
        return None
    want = connections + RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return None
    if hard == resource.RLIM_INFINITY or hard >= want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            return f"note: raised this process's open-file limit from {soft} to {want} for {what}"
        except (ValueError, OSError):
            pass
    shown_hard = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    raise UserError(
        f"{what} needs about {want} file descriptors (one connection per session, plus {RESERVE}); this process may "
        f"open {soft} (hard limit {shown_hard}). Raise the limit in the shell that runs the benchmark, e.g. "
        f"`ulimit -n {want}` (above the hard limit needs root or /etc/security/limits.conf), or ask for fewer "
        "sessions."
    )


def local_errno(chain: list[BaseException]) -> int | None:
    """The errno of a local shortage among an exception and what it wraps (None: not one)."""
    for exc in chain:
        code = getattr(exc, "errno", None)
        if isinstance(exc, OSError) and code in LOCAL_ERRNOS:
            return code
        if isinstance(exc, MemoryError):
            return errno.ENOMEM
    return None
