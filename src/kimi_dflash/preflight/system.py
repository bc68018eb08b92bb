"""The host settings the server depends on: automatic NUMA balancing, /dev/shm, and the port it will listen on."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from kimi_dflash.core.checks import CheckResult, failed, passed, warned
from kimi_dflash.preflight.request import DEFAULT_MIN_SHM_BYTES

if TYPE_CHECKING:
    from kimi_dflash.preflight.host import HostProbe
    from kimi_dflash.preflight.request import PreflightRequest

NUMA_SETTING = "/proc/sys/kernel/numa_balancing"
NUMA_FIX = "sudo sysctl -w kernel.numa_balancing=0"
NUMA_PERSIST = "to keep it across reboots: echo kernel.numa_balancing=0 | sudo tee /etc/sysctl.d/90-numa-balancing.conf"
SHM = "/dev/shm"


def check_numa(request: PreflightRequest, probe: HostProbe) -> CheckResult:
    """Page migration under the GPU runtime stalls it: the GPU path requires kernel.numa_balancing=0."""
    raw = probe.read_text(NUMA_SETTING)
    if raw is None:
        return passed(f"not a NUMA kernel ({NUMA_SETTING} absent)")
    value = raw.strip()
    if value == "0":
        return passed("0 (disabled)")
    if request.fix_numa:
        return _fix_numa(probe, value)
    if not request.on_gpu:
        return passed(f"{value} (enabled; only matters on the GPU path, the cpu demo runs with it)")
    return failed(
        f"{value} (enabled): page migration stalls the GPU runtime; the reference results were measured with it off",
        f"{NUMA_FIX}\n(or as root: kimi-dflash serve CONFIG --fix-numa; {NUMA_PERSIST})",
    )


def _fix_numa(probe: HostProbe, value: str) -> CheckResult:
    if not probe.is_root():
        return failed(f"{value} (enabled); --fix-numa needs root", NUMA_FIX)
    try:
        probe.write_text(NUMA_SETTING, "0\n")
    except OSError as error:
        # Containers mount /proc/sys read-only: the setting belongs to the host kernel.
        fix = f"run on the host (not inside a container): {NUMA_FIX}"
        return failed(f"{value} (enabled); writing {NUMA_SETTING} failed: {error.strerror or error}", fix)
    now = (probe.read_text(NUMA_SETTING) or "").strip()
    if now != "0":
        return failed(f"wrote 0 to {NUMA_SETTING} but it reads {now!r}", f"run on the host: {NUMA_FIX}")
    return passed(f"was {value}, set to 0 (fixed until reboot)")


def check_shm(request: PreflightRequest, probe: HostProbe) -> CheckResult:
    """NCCL/RCCL move tensor-parallel traffic through /dev/shm, and docker's default is 64 MB."""
    need = DEFAULT_MIN_SHM_BYTES[request.device] if request.min_shm_bytes is None else request.min_shm_bytes
    space = probe.space(probe.path(SHM))
    raise_to = max(1, -(-need // (1 << 30)))
    fix = (
        f"in docker: run with --shm-size={raise_to}g (or --ipc=host); on a host: "
        f"sudo mount -o remount,size={raise_to}G /dev/shm"
    )
    if space is None:
        detail = f"{SHM} not found"
        return failed(detail, fix) if request.on_gpu else warned(detail, fix)
    seen = f"{_gib(space.total_bytes)} total, {_gib(space.free_bytes)} free"
    if space.total_bytes < need:
        detail = f"{seen}; the {request.device} path needs at least {_gib(need)}"
        return failed(detail, fix) if request.on_gpu else warned(detail, fix)
    if space.free_bytes < need:
        return warned(
            f"{seen}; less than {_gib(need)} free", f"free space in {SHM} (stale files of crashed runs: ls -la {SHM})"
        )
    return passed(f"{seen} (needs {_gib(need)})")


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB" if nbytes >= 1 << 30 else f"{nbytes / (1 << 20):.0f} MiB"


def check_port(request: PreflightRequest, probe: HostProbe) -> CheckResult:
    host, port = request.host, request.port
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if not 1 <= port <= 65535:
        return failed(f"{port} is not a TCP port", "set PORT= (1-65535) in the config or the environment")
    error = probe.bind(host, port)
    if error is None:
        return passed(f"{where} is free")
    reason = error.strerror or str(error)
    if error.errno == errno.EADDRINUSE:
        return failed(
            f"{where} is in use ({reason})",
            f"pick another port: PORT={port + 1 if port < 65535 else 1024} in the config or the environment\n"
            f"or stop what listens there: ss -ltnp 'sport = :{port}' names it "
            "(kimi-dflash serve CONFIG --stop if it is our server)",
        )
    if error.errno in (errno.EACCES, errno.EPERM):
        fix = "set PORT= to 1024 or above in the config or the environment"
        return failed(f"{where}: {reason} (ports below 1024 need root)", fix)
    return failed(
        f"cannot listen on {where}: {reason}",
        "set HOST= to an address of this machine (127.0.0.1, the default, or 0.0.0.0 for all "
        "interfaces) in the config or the environment",
    )
