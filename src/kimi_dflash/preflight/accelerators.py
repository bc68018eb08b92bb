"""Accelerators: how many the plan can use, of which architecture, and whether torch in this Python sees them. Sources,
best first: amd-smi, rocm-smi, nvidia-smi, then torch; the vendor tools list every physical GPU, so
*_VISIBLE_DEVICES is applied to their answer (torch applies it itself)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kimi_dflash.core.checks import CheckResult, failed, passed, warned
from kimi_dflash.preflight.runtime_probe import Accelerator, normalize_arch

if TYPE_CHECKING:
    from kimi_dflash.preflight.host import HostProbe
    from kimi_dflash.preflight.request import PreflightRequest
    from kimi_dflash.preflight.runtime_probe import RuntimeReport

SMI_TIMEOUT_S = 60.0  # amd-smi static on 8 GPUs takes a few seconds; a wedged driver takes forever

# Visibility variables each runtime honours, outermost first (HIP indexes into what ROCR left visible).
VISIBILITY_VARIABLES: dict[str, tuple[str, ...]] = {
    "rocm": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    "cuda": ("CUDA_VISIBLE_DEVICES",),
}

EXPOSE_FIX = {
    "rocm": "check the amdgpu driver (amd-smi list); in docker pass --device=/dev/kfd --device=/dev/dri "
    "--group-add video (and --group-add render)",
    "cuda": "check the NVIDIA driver (nvidia-smi); in docker pass --gpus all",
}
UNREACHABLE_FIX = {
    "rocm": "the GPUs exist but this process cannot open them: add your user to the video and render groups "
    "(sudo usermod -aG video,render $USER, then log in again); in docker pass --device=/dev/kfd "
    "--device=/dev/dri --group-add video --group-add render",
    "cuda": "the GPUs exist but this process cannot open them: check CUDA_VISIBLE_DEVICES and that the driver "
    "supports torch's CUDA version (nvidia-smi shows the driver's); in docker pass --gpus all",
}
TORCH_FIX = {
    "rocm": "use the ROCm build of vLLM/torch (the rocm/vllm container image, or torch from "
    "https://download.pytorch.org/whl/rocm6.4) in the Python that runs serve.sh",
    "cuda": "use the CUDA build of vLLM/torch (pip install vllm pulls it) in the Python that runs serve.sh",
}


@dataclass(frozen=True)
class Detection:
    source: str | None  # "amd-smi", "rocm-smi", "nvidia-smi", "torch", or None when nothing answered
    devices: tuple[Accelerator, ...]
    notes: tuple[str, ...] = field(default=())  # why earlier sources gave nothing
    narrowed_by: tuple[str, ...] = field(default=())  # *_VISIBLE_DEVICES variables that hid some GPUs


def parse_amd_smi(stdout: str) -> list[Accelerator] | None:
    """`amd-smi static --asic --json`: a list of per-GPU objects (ROCm 6.x) or {"gpu_data": [...]} (newer).
    amd-smi may print warnings before the JSON, so decoding starts at the first bracket."""
    start = min((i for i in (stdout.find("["), stdout.find("{")) if i >= 0), default=-1)
    if start < 0:
        return None
    try:
        data, _ = json.JSONDecoder().raw_decode(stdout[start:])
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict):
        data = data.get("gpu_data", [data] if "gpu" in data else None)
    if not isinstance(data, list):
        return None
    devices = []
    for entry in data:
        asic = entry.get("asic") if isinstance(entry, dict) else None
        asic = asic if isinstance(asic, dict) else {}
        name, arch = str(asic.get("market_name") or "AMD GPU"), asic.get("target_graphics_version")
        devices.append(Accelerator(name, normalize_arch(arch)))
    return devices


_ROCM_SMI_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*([^:]+?)\s*:\s*(.*?)\s*$")


def parse_rocm_smi(stdout: str) -> list[Accelerator] | None:
    """`rocm-smi --showproductname`: lines like `GPU[0]  : GFX Version:  gfx942`."""
    fields: dict[int, dict[str, str]] = {}
    for line in stdout.splitlines():
        match = _ROCM_SMI_LINE.match(line.strip())
        if match:
            fields.setdefault(int(match.group(1)), {})[match.group(2).lower()] = match.group(3)
    gpus = (info for _, info in sorted(fields.items()))
    names = [(g.get("card series") or g.get("card model") or "AMD GPU", g.get("gfx version")) for g in gpus]
    return [Accelerator(name, normalize_arch(arch)) for name, arch in names] or None


def parse_nvidia_smi(stdout: str) -> list[Accelerator] | None:
    """`nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader`: `NVIDIA H200, 9.0` per GPU."""
    devices = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        name, sep, capability = line.rpartition(",")
        if not sep:
            return None
        devices.append(Accelerator(name.strip(), normalize_arch(capability)))
    return devices or None


Parser = Callable[[str], "list[Accelerator] | None"]
SMI_SOURCES: dict[str, tuple[tuple[str, tuple[str, ...], Parser], ...]] = {
    "rocm": (
        ("amd-smi", ("amd-smi", "static", "--asic", "--json"), parse_amd_smi),
        ("rocm-smi", ("rocm-smi", "--showproductname"), parse_rocm_smi),
    ),
    "cuda": (
        ("nvidia-smi", ("nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"), parse_nvidia_smi),
    ),
}


def apply_visibility(
    devices: Sequence[Accelerator], device: str, env: Mapping[str, str]
) -> tuple[tuple[Accelerator, ...], tuple[str, ...]]:
    """Narrow a physical device list the way the GPU runtime will; returns (visible, variables applied)."""
    visible = list(devices)
    applied = []
    for variable in VISIBILITY_VARIABLES.get(device, ()):
        value = env.get(variable)
        if value is None:
            continue
        chosen: list[Accelerator] = []
        for entry in (e.strip() for e in value.split(",") if e.strip()):
            if entry.isdigit() and int(entry) < len(visible):
                chosen.append(visible[int(entry)])
            elif not entry.isdigit() and entry.upper().startswith(("GPU-", "MIG-")) and len(chosen) < len(visible):
                chosen.append(visible[len(chosen)])  # a UUID: which GPU is unknown here, but the count is right
            else:
                break  # like the runtimes: an invalid entry ("-1", an index too high) ends the list
        visible = chosen
        applied.append(f"{variable}={value}")
    return tuple(visible), tuple(applied)


def detect(device: str, probe: HostProbe, runtime: RuntimeReport | None) -> Detection:
    notes = []
    for label, argv, parse in SMI_SOURCES.get(device, ()):
        output = probe.run(argv, SMI_TIMEOUT_S)
        if output is None:
            notes.append(f"{label} not installed")
            continue
        if output.returncode != 0:
            reason = (output.stderr.strip() or output.stdout.strip() or "no output").splitlines()[-1]
            notes.append(f"{label} failed (exit {output.returncode}: {reason})")
            continue
        devices = parse(output.stdout)
        if not devices:
            notes.append(f"{label} listed no GPUs")
            continue
        visible, applied = apply_visibility(devices, device, probe.env)
        if applied:
            notes.append(f"{', '.join(applied)} leaves {len(visible)} of {len(devices)}")
        return Detection(label, visible, tuple(notes), tuple(v.split("=", 1)[0] for v in applied))
    if runtime is not None and _torch_matches(device, runtime) and runtime.torch_devices:
        return Detection("torch", tuple(runtime.torch_devices), tuple(notes))
    if runtime is not None:
        torch = runtime.torch_error or f"torch {runtime.torch_version}, {runtime.torch_backend} build"
        notes.append(f"torch sees none ({torch})")
    return Detection(None, (), tuple(notes))


def describe(devices: Sequence[Accelerator]) -> str:
    groups = Counter((d.name, d.arch) for d in devices)
    return " + ".join(f"{count}x {name} ({arch or 'arch unknown'})" for (name, arch), count in groups.items())


def check_accelerators(request: PreflightRequest, probe: HostProbe, runtime: RuntimeReport | None) -> list[CheckResult]:
    if not request.on_gpu:
        return [passed(f"cpu demo: no accelerators needed ({_cpu_summary(probe)})", name="accelerators")]
    found = detect(request.device, probe, runtime)
    needed = request.tensor_parallel_size
    notes = f" [{'; '.join(found.notes)}]" if found.notes else ""
    if not found.devices:
        vendor = "AMD" if request.device == "rocm" else "NVIDIA"
        return [failed(f"no {vendor} GPUs found{notes}", EXPOSE_FIX[request.device], name="accelerators")]
    seen = f"{describe(found.devices)} via {found.source}{notes}"
    results = []
    if len(found.devices) < needed:
        smaller = f"set TENSOR_PARALLEL_SIZE to at most {len(found.devices)} if the model still fits"
        fix = f"run on a machine with {needed} GPUs, or {smaller}"
        if found.narrowed_by:
            fix = f"unset {' / '.join(found.narrowed_by)} (or list {needed} GPUs in it), or {smaller}"
        results.append(failed(f"{seen}; the plan needs TENSOR_PARALLEL_SIZE={needed}", fix, name="accelerators"))
    else:
        results.append(passed(f"{seen}; plan uses {needed}", name="accelerators"))
    results.append(_check_arch(request.expected_arch, found.devices[:needed]))
    if runtime is not None and found.source != "torch":
        results.append(_check_torch(request, runtime))
    return [r for r in results if r is not None]


def _check_arch(expected: str | None, devices: Sequence[Accelerator]) -> CheckResult | None:
    if expected is None:
        return None
    want = normalize_arch(expected)
    archs = Counter(d.arch for d in devices)
    if wrong := ", ".join(f"{n}x {arch}" for arch, n in archs.items() if arch is not None and arch != want):
        fix = f"this config targets {want}; run it on {want} hardware or pick the config made for yours"
        return failed(f"expected {want}, found {wrong}", fix, name="accelerator arch")
    if None in archs:
        return warned(
            f"expected {want}; {archs[None]} GPU(s) did not report an architecture",
            "check by hand: amd-smi static --asic (TARGET_GRAPHICS_VERSION) or "
            "nvidia-smi --query-gpu=compute_cap --format=csv",
            name="accelerator arch",
        )
    return passed(f"{want} on all {len(devices)} as expected", name="accelerator arch")


def _check_torch(request: PreflightRequest, runtime: RuntimeReport) -> CheckResult:
    build, count = f"torch {runtime.torch_version} ({runtime.torch_backend})", len(runtime.torch_devices)
    fix = TORCH_FIX[request.device]
    if runtime.torch_error is not None:
        detail = f"torch does not import in {runtime.python}: {runtime.torch_error}"
    elif not _torch_matches(request.device, runtime):
        needs = f"DEVICE={request.device} needs the {request.platform_name} build"
        detail = f"torch {runtime.torch_version} is a {runtime.torch_backend} build; {needs}"
    elif count < request.tensor_parallel_size:
        detail = f"{build} sees {count} GPU(s), the plan needs {request.tensor_parallel_size}"
        fix = UNREACHABLE_FIX[request.device]
    else:
        return passed(f"{build} sees {count}", name="torch devices")
    return failed(detail, fix, name="torch devices")


def _torch_matches(device: str, runtime: RuntimeReport) -> bool:
    return (runtime.torch_backend or "").startswith(device)


def _cpu_summary(probe: HostProbe) -> str:
    cores = probe.cpu_count()
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", probe.read_text("/proc/meminfo") or "", re.MULTILINE)
    ram = f", {int(match.group(1)) * 1024 / (1 << 30):.1f} GiB RAM" if match else ""
    return f"{cores} usable core{'s' if cores != 1 else ''}{ram}"
