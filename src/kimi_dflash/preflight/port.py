"""Can the server listen where the config says?"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from kimi_dflash.core.checks import CheckResult, failed, passed

if TYPE_CHECKING:
    from kimi_dflash.preflight.host import HostProbe
    from kimi_dflash.preflight.request import PreflightRequest

NAME = "port"


def check_port(request: PreflightRequest, probe: HostProbe) -> CheckResult:
    host, port = request.host, request.port
    where = f"{_bracket(host)}:{port}"
    if not 1 <= port <= 65535:
        return failed(NAME, f"{port} is not a TCP port", "set PORT= (1-65535) in the config or the environment")
    error = probe.bind(host, port)
    if error is None:
        return passed(NAME, f"{where} is free")
    reason = error.strerror or str(error)
    if error.errno == errno.EADDRINUSE:
        return failed(
            NAME,
            f"{where} is in use ({reason})",
            f"pick another port: PORT={_next_port(port)} in the config or the environment\n"
            f"or stop what listens there: ss -ltnp 'sport = :{port}' names it "
            "(kimi-dflash serve CONFIG --stop if it is our server)",
        )
    if error.errno in (errno.EACCES, errno.EPERM):
        return failed(
            NAME,
            f"{where}: {reason} (ports below 1024 need root)",
            "set PORT= to 1024 or above in the config or the environment",
        )
    return failed(
        NAME,
        f"cannot listen on {where}: {reason}",
        "set HOST= to an address of this machine (127.0.0.1, the default, or 0.0.0.0 for all "
        "interfaces) in the config or the environment",
    )


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _next_port(port: int) -> int:
    return port + 1 if port < 65535 else 1024
