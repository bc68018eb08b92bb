"""/dev/shm: NCCL/RCCL move tensor-parallel traffic through it, and docker's default is 64 MB."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimi_dflash.core.checks import CheckResult, failed, passed, warned

if TYPE_CHECKING:
    from kimi_dflash.preflight.host import HostProbe
    from kimi_dflash.preflight.request import PreflightRequest

NAME = "/dev/shm"
SHM = "/dev/shm"


def check_shm(request: PreflightRequest, probe: HostProbe) -> CheckResult:
    need = request.shm_threshold
    space = probe.space(probe.path(SHM))
    raise_to = _gib_ceiling(need)
    fix = (
        f"in docker: run with --shm-size={raise_to}g (or --ipc=host); on a host: "
        f"sudo mount -o remount,size={raise_to}G /dev/shm"
    )
    if space is None:
        detail = f"{SHM} not found"
        return failed(NAME, detail, fix) if request.on_gpu else warned(NAME, detail, fix)
    seen = f"{_gib(space.total_bytes)} total, {_gib(space.free_bytes)} free"
    if space.total_bytes < need:
        detail = f"{seen}; the {request.device} path needs at least {_gib(need)}"
        return failed(NAME, detail, fix) if request.on_gpu else warned(NAME, detail, fix)
    if space.free_bytes < need:
        return warned(
            NAME,
            f"{seen}; less than {_gib(need)} free",
            f"free space in {SHM} (stale files of crashed runs: ls -la {SHM})",
        )
    return passed(NAME, f"{seen} (needs {_gib(need)})")


def _gib(nbytes: int) -> str:
    value = nbytes / (1 << 30)
    return f"{value:.1f} GiB" if value >= 1 else f"{nbytes / (1 << 20):.0f} MiB"


def _gib_ceiling(nbytes: int) -> int:
    return max(1, -(-nbytes // (1 << 30)))
