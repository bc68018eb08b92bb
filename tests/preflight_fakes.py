"""Fakes for the preflight tests: a HostProbe over a temporary fake root, a recorded-output command runner,
and runtime reports.

The tool outputs below follow the formats amd-smi, rocm-smi and nvidia-smi print on 8x MI300X (gfx942) and
8x H200 machines (ROCm 6.x / recent NVIDIA drivers). There is no GPU on the test machine, so they are written
out in those formats rather than captured here; the parsers are tested against every shape variant we know.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kimi_dflash.preflight.host import CommandOutput, DiskSpace, HostProbe
from kimi_dflash.preflight.request import PreflightRequest
from kimi_dflash.preflight.runtime_probe import Accelerator, RuntimeReport
from kimi_dflash.rules.features import FeatureOutcome, parse_feature

GIB = 1 << 30
PYTHON = "/opt/venv/bin/python"


def amd_smi_static_json(count: int = 8, arch: str = "gfx942", name: str = "AMD Instinct MI300X") -> str:
    """`amd-smi static --asic --json` as ROCm 6.x prints it: a list with one object per GPU."""
    gpus = [
        {
            "gpu": index,
            "asic": {
                "market_name": name,
                "vendor_id": "0x1002",
                "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
                "subvendor_id": "0x1002",
                "device_id": "0x74a1",
                "subsystem_id": "0x74a1",
                "rev_id": "0x00",
                "asic_serial": f"0x{0x5E2A10C0FFEE0000 + index:016X}",
                "oam_id": index,
                "num_compute_units": 304,
                "target_graphics_version": arch,
            },
        }
        for index in range(count)
    ]
    return json.dumps(gpus, indent=4) + "\n"


def amd_smi_static_json_wrapped(count: int = 8) -> str:
    """Newer amd-smi wraps the list in {"gpu_data": [...]} and may print a warning line first."""
    gpus = json.loads(amd_smi_static_json(count))
    return (
        "WARNING: User is missing the following required groups: render. Please add user to these groups.\n"
        + json.dumps({"gpu_data": gpus}, indent=2)
        + "\n"
    )


def rocm_smi_productname(count: int = 8, arch: str = "gfx942") -> str:
    """`rocm-smi --showproductname` text output."""
    lines = ["", "=" * 28 + " ROCm System Management Interface " + "=" * 28, "=" * 38 + " Product Info " + "=" * 38]
    for i in range(count):
        lines += [
            f"GPU[{i}]\t\t: Card Series: \t\tAMD Instinct MI300X OAM",
            f"GPU[{i}]\t\t: Card Model: \t\t0x74a1",
            f"GPU[{i}]\t\t: Card Vendor: \t\tAdvanced Micro Devices, Inc. [AMD/ATI]",
            f"GPU[{i}]\t\t: Card SKU: \t\tM3000100",
            f"GPU[{i}]\t\t: Subsystem ID: \t0x74a1",
            f"GPU[{i}]\t\t: Device Rev: \t\t0x00",
            f"GPU[{i}]\t\t: Node ID: \t\t{i + 2}",
            f"GPU[{i}]\t\t: GUID: \t\t{28851 + i * 1117}",
            f"GPU[{i}]\t\t: GFX Version: \t\t{arch}",
        ]
    lines += ["=" * 90, "=" * 34 + " End of ROCm SMI Log " + "=" * 35, ""]
    return "\n".join(lines)


def nvidia_smi_query(count: int = 8, name: str = "NVIDIA H200", capability: str = "9.0") -> str:
    """`nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader`."""
    return "".join(f"{name}, {capability}\n" for _ in range(count))


NVIDIA_SMI_NO_DRIVER = CommandOutput(
    9,
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
    "NVIDIA driver is installed and running.\n\n",
)
AMD_SMI_NO_GPU = CommandOutput(
    255,
    "",
    "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)\n",
)


class FakeRunner:
    """Answers by program name (argv[0]); programs not in the table are 'not installed'. Records calls."""

    def __init__(self, outputs: Mapping[str, CommandOutput | str] | None = None) -> None:
        self.outputs = {k: CommandOutput(0, v) if isinstance(v, str) else v for k, v in (outputs or {}).items()}
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandOutput | None:
        self.calls.append(tuple(argv))
        return self.outputs.get(argv[0])


def runtime_report(
    features: tuple[str, ...] = (),
    *,
    distribution: str | None = "vllm",
    version: str | None = "0.21.0",
    import_error: str | None = None,
    installed: bool = True,
    absent: Sequence[str] = (),
    unknown: Sequence[str] = (),
    torch_backend: str | None = "rocm 6.4.1",
    torch_devices: Sequence[Accelerator] | None = None,
    torch_error: str | None = None,
) -> RuntimeReport:
    """A runtime probe answer. Features are present unless listed in `absent` / `unknown`."""
    if torch_devices is None:
        torch_devices = (
            [Accelerator("AMD Instinct MI300X", "gfx942")] * 8 if (torch_backend or "").startswith("rocm") else []
        )
    outcomes = []
    for name in features:
        parse_feature(name)
        state = "absent" if name in absent else "unknown" if name in unknown else "present"
        outcomes.append(FeatureOutcome(name, state, "SpeculativeMethod in vllm/config/speculative.py"))
    return RuntimeReport(
        python=PYTHON,
        vllm_distribution=distribution if installed else None,
        vllm_version=version if installed else None,
        vllm_import_error=import_error if installed else "ModuleNotFoundError: No module named 'vllm'",
        vllm_source="/opt/venv/lib/python3.12/site-packages/vllm" if installed else None,
        features=tuple(outcomes),
        torch_version="2.9.1+rocm6.4" if (torch_backend or "").startswith("rocm") else "2.13.0",
        torch_backend=torch_backend,
        torch_devices=tuple(torch_devices),
        torch_error=torch_error,
    )


@dataclass
class FakeHost:
    """Builds a HostProbe over `root` (a tmp dir): fake /proc files, canned commands, binder and shm size."""

    root: Path
    numa: str | None = "0"
    commands: Mapping[str, CommandOutput | str] = field(default_factory=dict)
    root_user: bool = False
    bind_result: OSError | None = None
    shm: DiskSpace | None = field(default_factory=lambda: DiskSpace(64 * GIB, 64 * GIB))
    runtime_kwargs: dict = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    cores: int = 2
    mem_total_kb: int = 24_608_056

    def probe(self) -> HostProbe:
        kernel = self.root / "proc/sys/kernel"
        kernel.mkdir(parents=True, exist_ok=True)
        if self.numa is not None:
            (kernel / "numa_balancing").write_text(self.numa + "\n")
        (self.root / "dev/shm").mkdir(parents=True, exist_ok=True)
        (self.root / "proc/meminfo").write_text(
            f"MemTotal:       {self.mem_total_kb} kB\nMemFree:        20000000 kB\n"
        )
        self.runner = FakeRunner(self.commands)
        self.binds: list[tuple[str, int]] = []
        self.runtime_calls: list[tuple[str, ...]] = []

        def bind(host: str, port: int) -> OSError | None:
            self.binds.append((host, port))
            return self.bind_result

        def runtime(request: PreflightRequest) -> RuntimeReport:
            self.runtime_calls.append((request.required_features, request.interpreter))
            return runtime_report(request.required_features, **self.runtime_kwargs)

        return HostProbe(
            root=self.root,
            run=self.runner,
            is_root=lambda: self.root_user,
            bind=bind,
            space=lambda _path: self.shm,
            runtime=runtime,
            cpu_count=lambda: self.cores,
            env=self.env,
        )

    @property
    def numa_file(self) -> Path:
        return self.root / "proc/sys/kernel/numa_balancing"
