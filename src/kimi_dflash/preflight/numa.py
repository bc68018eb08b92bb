"""Automatic NUMA balancing: the kernel migrating pages under the GPU runtime stalls it, so the GPU path
requires kernel.numa_balancing=0 (the reference results were measured with it off)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimi_dflash.core.checks import CheckResult, failed, passed

if TYPE_CHECKING:
    from kimi_dflash.preflight.host import HostProbe
    from kimi_dflash.preflight.request import PreflightRequest

NAME = "numa balancing"
SETTING = "/proc/sys/kernel/numa_balancing"
FIX_COMMAND = "sudo sysctl -w kernel.numa_balancing=0"
PERSIST_HINT = "to keep it across reboots: echo kernel.numa_balancing=0 | sudo tee /etc/sysctl.d/90-numa-balancing.conf"


def check_numa(request: PreflightRequest, probe: HostProbe) -> CheckResult:
    raw = probe.read_text(SETTING)
    if raw is None:
        return passed(NAME, f"not a NUMA kernel ({SETTING} absent)")
    value = raw.strip()
    if value == "0":
        return passed(NAME, "0 (disabled)")
    if request.fix_numa:
        return _fix(request, probe, value)
    if not request.on_gpu:
        return passed(NAME, f"{value} (enabled; only matters on the GPU path, the cpu demo runs with it)")
    return failed(
        NAME,
        f"{value} (enabled): page migration stalls the GPU runtime; the reference results were measured with it off",
        f"{FIX_COMMAND}\n(or as root: kimi-dflash serve CONFIG --fix-numa; {PERSIST_HINT})",
    )


def _fix(request: PreflightRequest, probe: HostProbe, value: str) -> CheckResult:
    if not probe.is_root():
        return failed(NAME, f"{value} (enabled); --fix-numa needs root", FIX_COMMAND)
    try:
        probe.write_text(SETTING, "0\n")
    except OSError as error:
        # Containers mount /proc/sys read-only: the setting belongs to the host kernel.
        return failed(
            NAME,
            f"{value} (enabled); writing {SETTING} failed: {error.strerror or error}",
            f"run on the host (not inside a container): {FIX_COMMAND}",
        )
    now = (probe.read_text(SETTING) or "").strip()
    if now != "0":
        return failed(NAME, f"wrote 0 to {SETTING} but it reads {now!r}", f"run on the host: {FIX_COMMAND}")
    return passed(NAME, f"was {value}, set to 0 (fixed until reboot)")
