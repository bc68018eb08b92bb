"""Simulated GPU platforms for the dry engine on a host without the plan's accelerator (stdlib only at top level).

The dry engine's child runs this file (runpy) before it imports vLLM, when the plan's DEVICE differs from the host's.
Each fake stands in for hardware or a GPU-only library that vLLM's start-up code asks about; every one is listed in
the child's report, because each is exactly where the verdict stops being evidence:

- rocm: a stub `amdsmi` (gfx942, 192 GiB, 8 processor handles, XGMI one hop: what vllm/platforms/rocm.py imports and
  calls), `RocmPlatform()` as vLLM's current platform, a stub `aiter` package (every attribute a no-op callable, so
  every "is aiter supported" probe says yes), Triton reported active, and torch.cuda stand-ins.
- cuda: `CudaPlatform()` (its NVML-free subclass, so no pynvml is needed) with an H200's capability (9.0, 141 GiB),
  Triton reported active, torch.cuda stand-ins.

On a host that has the plan's accelerator none of this runs: the child uses vLLM's real platform.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import types

GIB = 1 << 30
ROCM_ARCH = "gfx942"
ROCM_MEMORY = 192 * GIB
CUDA_CAPABILITY = (9, 0)
CUDA_MEMORY = 141 * GIB
DEVICES = 8
CUDA_EXTENSIONS = (
    "vllm._C_stable_libtorch",
    "vllm._moe_C",
    "vllm.vllm_flash_attn._vllm_fa2_C",
    "vllm.vllm_flash_attn._vllm_fa3_C",
    "vllm._flashmla_C",
    "vllm._flashmla_extension_C",
    "vllm.third_party.flashmla",
)


def _stub_callable(name: str) -> type:
    """A stand-in for any name a stub module is asked for: a class, so it works as a callable (returns an inert,
    truthy object), as a base class and in type annotations (`X | None`)."""
    return type(name, (), {"__init__": lambda self, *args, **kwargs: None})


class _StubModule(types.ModuleType):
    """A module where every missing attribute is a no-op callable (enough for `from aiter import X` and probes)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stub_callable(name)
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of `root` and every `root.x.y` with a _StubModule (aiter has many submodules)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.root or fullname.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        return None


def _install_stub_package(root: str) -> None:
    sys.meta_path.insert(0, _StubFinder(root))


def _stub_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return module


def _amdsmi_module() -> types.ModuleType:
    amdsmi = types.ModuleType("amdsmi")
    amdsmi.__spec__ = importlib.machinery.ModuleSpec("amdsmi", None)

    class AmdSmiException(Exception):
        pass

    class AmdSmiMemoryType:
        VRAM = 0

    handles = [f"gpu{i}" for i in range(DEVICES)]
    amdsmi.AmdSmiException = AmdSmiException
    amdsmi.AmdSmiMemoryType = AmdSmiMemoryType
    amdsmi.amdsmi_init = lambda *a, **k: None
    amdsmi.amdsmi_shut_down = lambda *a, **k: None
    amdsmi.amdsmi_get_processor_handles = lambda: list(handles)
    amdsmi.amdsmi_get_gpu_asic_info = lambda handle: {
        "target_graphics_version": ROCM_ARCH,
        "market_name": "AMD Instinct MI300X (simulated)",
    }
    amdsmi.amdsmi_get_gpu_device_uuid = lambda handle: f"simulated-{handle}"
    amdsmi.amdsmi_get_gpu_memory_total = lambda handle, kind=0: ROCM_MEMORY
    amdsmi.amdsmi_topo_get_link_type = lambda a, b: {"hops": 1, "type": 2}
    amdsmi.amdsmi_topo_get_numa_node_number = lambda handle: 0
    return amdsmi


class _DeviceProperties:
    def __init__(self, platform: str) -> None:
        self.name = "AMD Instinct MI300X (simulated)" if platform == "rocm" else "NVIDIA H200 (simulated)"
        self.gcnArchName = ROCM_ARCH
        self.total_memory = ROCM_MEMORY if platform == "rocm" else CUDA_MEMORY
        self.major, self.minor = (9, 4) if platform == "rocm" else CUDA_CAPABILITY
        self.multi_processor_count = 304 if platform == "rocm" else 132
        self.warp_size = 64 if platform == "rocm" else 32


class _Placeholder:
    """torch.cuda.Stream / Event stand-in: constructible, every method a no-op."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name: str):
        return _stub_callable(name)


def _patch_torch_cuda(platform: str) -> list[str]:
    import torch

    props = _DeviceProperties(platform)
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: DEVICES
    cuda._is_compiled = lambda: True
    torch._C._cuda_getDeviceCount = lambda: DEVICES  # vLLM's stateless device count reads the raw binding
    cuda._device_count_amdsmi = lambda: DEVICES
    cuda._device_count_nvml = lambda: DEVICES
    cuda.current_device = lambda: 0
    cuda.set_device = lambda device: None
    cuda.get_device_properties = lambda device=None: props
    cuda.get_device_capability = lambda device=None: (props.major, props.minor)
    cuda.get_device_name = lambda device=None: props.name
    cuda.mem_get_info = lambda device=None: (props.total_memory, props.total_memory)
    cuda.Stream = _Placeholder
    cuda.Event = _Placeholder
    cuda.current_stream = lambda device=None: _Placeholder()
    cuda.is_current_stream_capturing = lambda: False
    cuda.synchronize = lambda device=None: None
    cuda.empty_cache = lambda: None
    cuda.manual_seed_all = lambda seed: None
    if platform == "rocm":
        torch.version.hip = torch.version.hip or "7.0.0 (simulated)"
    return [
        f"torch.cuda reports {DEVICES} {props.name} devices (capability {props.major}.{props.minor}, "
        f"{props.total_memory // GIB} GiB); Stream/Event are placeholders; tensors are built on the meta device"
    ]


def _cutlass_capability_probes() -> str:
    """vLLM asks the CUDA op library at import which CUTLASS kernels it was built with, per compute capability;
    answer as a CUDA wheel built for sm90/sm100 would (fp8 from 8.9, block fp8 and grouped GEMM on 9.x-10.x,
    fp4 from 10.0)."""
    import vllm._custom_ops as ops

    ops.cutlass_scaled_mm_supports_fp8 = lambda capability: capability >= 89
    ops.cutlass_scaled_mm_supports_block_fp8 = lambda capability: 90 <= capability < 110
    ops.cutlass_scaled_mm_supports_fp4 = lambda capability: 100 <= capability < 110
    ops.cutlass_group_gemm_supported = lambda capability: 90 <= capability < 110
    return "CUTLASS capability probes answered per compute capability (fp8 >= 8.9, block fp8 9.x-10.x, fp4 10.x)"


class _StubOp(type):
    """A missing op's stand-in: callable, and every attribute (`.default`, an overload) is itself."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return cls


@contextlib.contextmanager
def lenient_ops():
    """While the model is built on meta: layers and compile passes bind GPU ops at construction (SiluAndMul:
    torch.ops._C.silu_and_mul; fusion passes: rms_norm_static_fp8_quant ...), which the CPU build's _C lacks.
    Hand out an inert stand-in for a missing op (nothing calls it: no kernel runs). Only around construction:
    during config building, `hasattr(torch.ops._C, op)` must keep answering truthfully."""
    import torch

    namespace = torch.ops._C
    base = type(namespace)

    class _LenientOpNamespace(base):  # type: ignore[misc, valid-type]
        def __getattr__(self, name: str):
            try:
                return base.__getattr__(self, name)
            except AttributeError:
                if name.startswith("__"):
                    raise
                return _StubOp(name, (), {"__init__": lambda self, *args, **kwargs: None})

    namespace.__class__ = _LenientOpNamespace
    try:
        yield LENIENT_OPS
    finally:
        namespace.__class__ = base


LENIENT_OPS = "while the model is built on meta, torch.ops._C answers a missing (GPU-only) op with an inert stand-in"


def _report_triton_active() -> list[str]:
    """The CPU build's vllm.triton_utils decides at import that Triton is off (no GPU driver) and hands out
    placeholders for `triton` / `tl`; every `from vllm.triton_utils import HAS_TRITON, tl` binds them at import.
    So: import it first, turn it on, give it the real (installed) Triton modules, before anything else binds them."""
    import triton
    import triton.language as tl
    import triton.language.extra.libdevice as tldevice
    import vllm.triton_utils as triton_utils
    import vllm.triton_utils.importing as importing
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.language.core import _aggregate

    importing.HAS_TRITON = True
    real = {"HAS_TRITON": True, "triton": triton, "tl": tl, "tldevice": tldevice, "gluon": gluon, "gl": gl}
    real["aggregate"] = _aggregate
    for name, value in real.items():
        setattr(triton_utils, name, value)
    return [
        f"Triton reported active (vllm.triton_utils HAS_TRITON=True, real triton {triton.__version__} modules; "
        "no GPU driver here, no kernel is compiled)"
    ]


def install(platform: str) -> list[str]:
    """Install the fakes for `platform` ("rocm" or "cuda") and return one line per fake. Must run before vLLM's
    current_platform is resolved (the child calls it right after importing vllm.platforms)."""
    import vllm.platforms as platforms

    if platforms._current_platform is not None:
        raise RuntimeError("vLLM's current platform was resolved before the simulated platform was installed")
    fakes = _report_triton_active() + _patch_torch_cuda(platform)
    if platform == "rocm":
        sys.modules["amdsmi"] = _amdsmi_module()
        fakes.append(f"stub amdsmi: {DEVICES} handles, {ROCM_ARCH}, {ROCM_MEMORY // GIB} GiB, XGMI one hop")
        _install_stub_package("aiter")
        fakes.append("stub aiter package: every aiter import and 'supported' probe answers yes; no kernel exists")
        from vllm.platforms.rocm import RocmPlatform

        platforms._current_platform = RocmPlatform()
        fakes.append("vllm.platforms.current_platform = RocmPlatform() (no ROCm driver here)")
    elif platform == "cuda":
        # The CUDA wheel's compiled extensions: platforms/cuda.py imports the op library at top level, and the
        # attention backends ask whether flash-attention and FlashMLA were built. The CPU build has none.
        for name in CUDA_EXTENSIONS:
            _install_stub_package(name)
        fakes.append(f"empty CUDA-only modules ({', '.join(CUDA_EXTENSIONS)}): present, no op registered")
        from vllm.platforms.cuda import NonNvmlCudaPlatform

        platforms._current_platform = NonNvmlCudaPlatform()
        fakes.append("vllm.platforms.current_platform = NonNvmlCudaPlatform() (no NVIDIA driver here, no NVML)")
        fakes.append(_cutlass_capability_probes())
    else:
        raise ValueError(f"no simulated platform for {platform!r} (rocm or cuda)")
    return fakes
