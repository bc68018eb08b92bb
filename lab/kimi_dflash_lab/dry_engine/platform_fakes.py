"""Simulated GPU platforms for the dry engine on a host without the plan's accelerator (stdlib only at top level).

The dry engine's child registers `platform_plugin` as a `vllm.platform_plugins` entry point (child.py), so the fakes
go in while vLLM resolves its platform, before any vLLM module binds what they replace. Each fake stands in for
hardware or a GPU-only library that vLLM's start-up code asks about; every one is listed in
the child's report, because each is exactly where the verdict stops being evidence:

- rocm: a stub `amdsmi` (gfx942, 192 GiB, 8 processor handles, XGMI one hop: what vllm/platforms/rocm.py imports and
  calls), `RocmPlatform` as vLLM's platform, a stub `aiter` package (every attribute a no-op callable, so
  every "is aiter supported" probe says yes), Triton reported active, and torch.cuda stand-ins.
- cuda: `NonNvmlCudaPlatform` (CudaPlatform without NVML) with an H200's or an H100's capability (9.0, 141 or
  80 GiB), empty modules for the CUDA wheel's compiled extensions (they need libcuda to load), Triton reported
  active, torch.cuda stand-ins.

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
CUDA_GPUS = {"H200": 141 * GIB, "H100": 80 * GIB}  # both sm_90
DEFAULT_CUDA_GPU = "H200"
DEVICES = 8
CUDA_EXTENSIONS = (
    "vllm._C_stable_libtorch",
    "vllm._moe_C",
    "vllm._moe_C_stable_libtorch",
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
    def __init__(self, platform: str, cuda_gpu: str = DEFAULT_CUDA_GPU) -> None:
        self.name = "AMD Instinct MI300X (simulated)" if platform == "rocm" else f"NVIDIA {cuda_gpu} (simulated)"
        self.gcnArchName = ROCM_ARCH
        self.total_memory = ROCM_MEMORY if platform == "rocm" else CUDA_GPUS[cuda_gpu]
        self.major, self.minor = (9, 4) if platform == "rocm" else CUDA_CAPABILITY
        self.multi_processor_count = 304 if platform == "rocm" else 132
        self.warp_size = 64 if platform == "rocm" else 32


class _Placeholder:
    """torch.cuda.Stream / Event stand-in: constructible, every method a no-op."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name: str):
        return _stub_callable(name)


def _patch_torch_cuda(platform: str, cuda_gpu: str = DEFAULT_CUDA_GPU) -> list[str]:
    import torch

    props = _DeviceProperties(platform, cuda_gpu)
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
def lenient_ops(everywhere: bool = False):
    """While the model is built on meta: layers and compile passes bind GPU ops at construction (SiluAndMul:
    torch.ops._C.silu_and_mul; fusion passes: rms_norm_static_fp8_quant ...), which the CPU build's _C lacks.
    Hand out an inert stand-in for a missing op (nothing calls it: no kernel runs). With a CPU build, only around
    construction: during config building, `hasattr(torch.ops._C, op)` must keep answering truthfully. With a CUDA
    wheel whose op library is a stand-in (`everywhere`), every op is answered from config building on: the real
    library registers them, so "present" is the truthful answer there."""
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
        yield LENIENT_OPS_EVERYWHERE if everywhere else LENIENT_OPS
    finally:
        namespace.__class__ = base


LENIENT_OPS = "while the model is built on meta, torch.ops._C answers a missing (GPU-only) op with an inert stand-in"
LENIENT_OPS_EVERYWHERE = (
    "torch.ops._C answers every op with an inert stand-in (the CUDA wheel's op library, which registers them, "
    "needs libcuda to load); no kernel runs"
)


def op_library_stubbed() -> bool:
    """Whether this vLLM is a CUDA wheel whose compiled op library (vllm/_C_stable_libtorch*.so) ships but was
    stood in for (it cannot load without libcuda). A CPU build ships vllm/_C*.so with its own ops instead."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("vllm")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return bool(locations) and any(Path(locations[0]).glob("_C_stable_libtorch*.so"))


def _report_triton_active() -> list[str]:
    """A CPU build's vllm.triton_utils decides at import that Triton is off and hands out placeholders for
    `triton` / `tl`; every `from vllm.triton_utils import HAS_TRITON, tl` binds them at import. So: import it first,
    turn it on, give it the real (installed) Triton modules, before anything else binds them. (A CUDA wheel already
    found Triton on through the driver stand-in of _triton_driver_active: nothing to do.)"""
    import triton
    import vllm.triton_utils as triton_utils
    import vllm.triton_utils.importing as importing

    if triton_utils.HAS_TRITON and not isinstance(triton_utils.triton, importing.TritonPlaceholder):
        return []
    import triton.language as tl
    import triton.language.extra.libdevice as tldevice
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


def _triton_driver_active(platform: str) -> str:
    """Triton's own GPU driver answers "active" (vllm.triton_utils asks it before deciding Triton is usable)."""
    from triton.backends import backends

    name = "amd" if platform == "rocm" else "nvidia"
    backends[name].driver.is_active = staticmethod(lambda: True)
    return f"Triton's {name} driver reports itself active (no GPU driver here, no kernel is compiled)"


# What the platform plugin hands vLLM, per simulated DEVICE.
PLATFORM_CLASSES = {"rocm": "vllm.platforms.rocm.RocmPlatform", "cuda": "vllm.platforms.cuda.NonNvmlCudaPlatform"}
# Filled by platform_plugin (vLLM may call it more than once); the dry engine's child reads it for its report.
STATE: dict[str, object] = {"host": None, "fakes": [], "platform": None}


def _host_op_library() -> str | None:
    """platforms/rocm.py imports `vllm._C` at top level. In a CPU build that is the AVX512-BF16 op library, which kills
    a host without those instructions (SIGILL: no output, no verdict). There, load the variant CpuPlatform would
    (`_C_AVX512` or `_C_AVX2`: its ops register as it loads) and answer `vllm._C` with an empty module. None when
    nothing needs standing in for (the host runs `_C`, or this vLLM ships no variants)."""
    import importlib.util
    from pathlib import Path

    import torch

    spec = importlib.util.find_spec("vllm")
    package = Path(next(iter(spec.submodule_search_locations or []), "")) if spec else Path()
    if torch.cpu._is_avx512_bf16_supported() or not any(package.glob("_C_AVX2*.so")):
        return None
    variant = "vllm._C_AVX512" if torch.cpu._is_avx512_supported() else "vllm._C_AVX2"
    with contextlib.suppress(ImportError):  # "does not define module export function": loaded all the same
        importlib.import_module(variant)
    sys.modules["vllm._C"] = _stub_module("vllm._C")
    return f"vllm._C: this host lacks AVX512-BF16, so the CPU build's {variant} op library loaded in its place"


def host_platform() -> str:
    """The platform vLLM's own built-in probes find on this machine ("none" when none answers)."""
    from vllm.platforms import builtin_platform_plugins

    found = []
    for name, probe in builtin_platform_plugins.items():
        try:
            if probe() is not None:
                found.append(name)
        except Exception:  # noqa: BLE001 - vLLM ignores a failing probe the same way
            pass
    return found[0] if found else "none"


def platform_plugin(platform: str, cuda_gpu: str = DEFAULT_CUDA_GPU) -> str | None:
    """The body of the dry engine's `vllm.platform_plugins` entry point (see child.py). vLLM resolves its platform
    at the first use of `current_platform`, which `import vllm` itself triggers in some releases (0.26: PIN_MEMORY
    in utils/torch_utils.py), so the fakes are installed from inside that resolution, before any vLLM module binds
    what they replace. On a host whose vLLM finds `platform` for real, nothing is faked (None: vLLM's own probe
    wins). Must not import any vLLM module that reads `current_platform` (that would resolve it again)."""
    if STATE["host"] is None:
        STATE["host"] = host_platform()
        if STATE["host"] == platform:
            return None
        if platform not in PLATFORM_CLASSES:
            raise ValueError(f"no simulated platform for {platform!r} (rocm or cuda)")
        fakes = _patch_torch_cuda(platform, cuda_gpu)
        fakes.append(_triton_driver_active(platform))
        if platform == "rocm":
            fakes += filter(None, [_host_op_library()])
            sys.modules["amdsmi"] = _amdsmi_module()
            fakes.append(f"stub amdsmi: {DEVICES} handles, {ROCM_ARCH}, {ROCM_MEMORY // GIB} GiB, XGMI one hop")
            _install_stub_package("aiter")
            fakes.append("stub aiter package: every aiter import and 'supported' probe answers yes; no kernel exists")
        else:
            # The CUDA wheel's compiled extensions need libcuda.so.1 to load: platforms/cuda.py imports the op
            # library at top level, and the attention backends ask whether flash-attention and FlashMLA were built.
            for name in CUDA_EXTENSIONS:
                _install_stub_package(name)
            fakes.append(f"empty CUDA-only modules ({', '.join(CUDA_EXTENSIONS)}): present, no op registered")
        fakes.append(f"vLLM's platform = {PLATFORM_CLASSES[platform]} (a platform plugin; no GPU driver here)")
        STATE["fakes"], STATE["platform"] = fakes, PLATFORM_CLASSES[platform]
    return STATE["platform"]  # type: ignore[return-value]


def after_resolution(platform: str) -> list[str]:
    """The fakes that need vLLM's platform resolved first (they import vLLM modules that read it)."""
    fakes = _report_triton_active()
    if platform == "cuda":
        fakes.append(_cutlass_capability_probes())
    return fakes
