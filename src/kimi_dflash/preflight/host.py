"""All host access the preflight checks make, behind one injectable object (tests fake /proc, /dev/shm, the vendor
tools' output and the runtime report)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kimi_dflash.preflight.request import PreflightRequest
    from kimi_dflash.preflight.runtime_probe import RuntimeReport

# amd-smi / rocm-smi / nvidia-smi are often installed outside PATH (containers, sudo's secure_path).
EXTRA_TOOL_DIRS: tuple[str, ...] = ("/opt/rocm/bin", "/usr/local/cuda/bin", "/usr/bin", "/usr/local/bin")


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str = ""


@dataclass(frozen=True)
class DiskSpace:
    total_bytes: int
    free_bytes: int


# argv, timeout in seconds -> output, or None when the program is not installed.
CommandRunner = Callable[[Sequence[str], float], "CommandOutput | None"]
# host, port -> None when the server could bind there, else the OSError binding raised.
PortBinder = Callable[[str, int], "OSError | None"]


def run_command(argv: Sequence[str], timeout: float) -> CommandOutput | None:
    program = shutil.which(argv[0]) or shutil.which(argv[0], path=os.pathsep.join(EXTRA_TOOL_DIRS))
    if program is None:
        return None
    try:
        proc = subprocess.run(
            [program, *argv[1:]], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired:
        return CommandOutput(124, "", f"{argv[0]} did not answer within {timeout:g} s")
    except OSError as error:
        return CommandOutput(126, "", f"{argv[0]}: {error}")
    return CommandOutput(proc.returncode, proc.stdout, proc.stderr)


def bind_error(host: str, port: int) -> OSError | None:
    """Bind host:port as vLLM's server socket does, then release it. SO_REUSEADDR like vLLM: a stopped server's
    TIME_WAIT connections do not count, a live listener still does (Linux). No SO_REUSEPORT, so a leftover vLLM
    that set it is reported instead of silently sharing the port."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        return OSError(error.errno, f"cannot resolve {host!r}: {error.strerror}")
    family, socktype, proto, _, address = infos[0]
    with socket.socket(family, socktype, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as error:
            return error
    return None


def disk_space(path: Path) -> DiskSpace | None:
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return DiskSpace(total_bytes=stats.f_blocks * stats.f_frsize, free_bytes=stats.f_bavail * stats.f_frsize)


def effective_uid_is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def usable_cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects taskset / cgroup cpusets, unlike os.cpu_count()
    except AttributeError:
        return os.cpu_count() or 1


def _default_runtime(request: PreflightRequest) -> RuntimeReport:
    from kimi_dflash.preflight.runtime_probe import probe_runtime

    env = None if request.deployment is None else request.deployment.env  # inherited + the plan's
    return probe_runtime(request.required_features, python=request.interpreter, env=env, imports=request.imports)


@dataclass(frozen=True)
class HostProbe:
    """The machine as the checks see it. Every field has a real default; tests replace what they fake."""

    root: Path = Path("/")  # prefix for /proc and /dev/shm paths
    run: CommandRunner = run_command  # amd-smi / rocm-smi / nvidia-smi
    is_root: Callable[[], bool] = effective_uid_is_root  # may we write /proc/sys (--fix-numa)
    bind: PortBinder = bind_error
    space: Callable[[Path], DiskSpace | None] = disk_space
    # (the plan's features, the Python that will run vLLM, vLLM's environment) -> the child process's report
    runtime: Callable[[PreflightRequest], RuntimeReport] = _default_runtime
    cpu_count: Callable[[], int] = usable_cpu_count
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)  # for *_VISIBLE_DEVICES

    def path(self, absolute: str) -> Path:
        """`absolute` ("/proc/...") under this probe's root."""
        return self.root / absolute.lstrip("/")

    def read_text(self, absolute: str) -> str | None:
        try:
            return self.path(absolute).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write_text(self, absolute: str, text: str) -> None:
        """Write a /proc/sys setting in place (a sysctl file cannot be replaced atomically, only written)."""
        self.path(absolute).write_text(text, encoding="utf-8")
