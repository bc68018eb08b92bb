"""The MoE experts' kernel: --moe-backend must fit the checkpoint's WNA16 (INT4) experts, and on the CPU build those
experts need a CPU kernel on this host. vLLM raises for both while the model is built."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.checks import failed, passed, warned
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Findings, Rule, label
from kimi_dflash.rules.source import VllmSource

WNA16_ORACLE = "vllm/model_executor/layers/fused_moe/oracle/int_wna16.py"
CT_MOE_DIR = "vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/"
# The class vLLM builds for compressed-tensors WNA16 experts, by preference: CUDA's Marlin method where a release has
# one (it fits Kimi's shapes); ROCm (Marlin is CUDA-only) and the CPU build fall through to the generic method.
WNA16_METHODS = {
    "rocm": ("CompressedTensorsWNA16MoEMethod",),
    "cpu": ("CompressedTensorsWNA16MoEMethod",),
    "cuda": ("CompressedTensorsWNA16MarlinMoEMethod", "CompressedTensorsWNA16MoEMethod"),
}
CPU_EXPERTS = "vllm/model_executor/layers/fused_moe/experts/cpu_moe.py"
AMX_PROBE = "_is_amx_tile_supported"
ZEN_ENV = "VLLM_CPU_INT4_W4A8"
NO_CPU_KERNEL = "No WNA16 MoE backend supports the deployment configuration"
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class Wna16BackendChoice:
    method: str  # the MoE method class vLLM builds for these experts
    honours_moe_backend: bool  # the method passes --moe-backend to select_wna16_moe_backend, which maps it
    accepted: tuple[str, ...]  # --moe-backend values map_wna16_backend accepts (when honoured)


def wna16_backend_choice(source: VllmSource, platform: str) -> Wna16BackendChoice | None:
    """The WNA16 method class, whether it hands --moe-backend to map_wna16_backend, and that mapping's keys."""
    for method in WNA16_METHODS.get(platform, ()):
        module = source.find_module(method, CT_MOE_DIR)
        if module is None:
            continue
        calls_oracle = bool(source.calls(module, method, "select_wna16_moe_backend"))
        oracle = source.function(WNA16_ORACLE, "select_wna16_moe_backend")
        maps = oracle is not None and "map_wna16_backend(" in ast.unparse(oracle)
        accepted = source.dict_keys(WNA16_ORACLE, "mapping", "map_wna16_backend") or ()
        return Wna16BackendChoice(method, calls_oracle and maps and bool(accepted), tuple(accepted))
    return None


def host_has_amx(cpuinfo: Path = CPUINFO) -> bool | None:
    """The `amx_tile` flag; None when /proc/cpuinfo cannot be read."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return "amx_tile" in flags.split()


def _check_wna16_moe_backend(deployment: Deployment, source: VllmSource) -> Findings:
    target, backend = deployment.target, deployment.moe_backend
    if target is None:
        fix = "set MODEL_DIR to the downloaded checkpoint"
        return warned("cannot check --moe-backend against the experts' quantisation: no checkpoint facts", fix)
    if target.wna16_experts is None:
        what = "are not WNA16-quantised" if target.routed_experts else "do not exist (no MoE layers)"
        return passed(f"--moe-backend {backend}: the target's MoE experts {what}")
    choice = wna16_backend_choice(source, deployment.platform)
    if choice is None:
        return warned(
            f"--moe-backend {backend}: cannot verify, no compressed-tensors WNA16 MoE method found in {label(source)}"
        )
    if backend == "auto":
        kernel = "its WNA16 oracle picks the" if choice.honours_moe_backend else "it runs vLLM's Triton WNA16"
        return passed(f"no --moe-backend: {choice.method} handles the experts; {kernel} kernel")
    if not choice.honours_moe_backend:
        return passed(
            f"--moe-backend {backend} is ignored for these experts on {deployment.platform}: {choice.method} "
            "never reads it (Triton WNA16 kernel); harmless here, but releases whose WNA16 oracle maps "
            "--moe-backend refuse values it does not list"
        )
    if backend in choice.accepted:
        return passed(f"--moe-backend {backend} is accepted for WNA16 experts ({choice.method})")
    return failed(
        f"--moe-backend {backend}: {choice.method} passes it to select_wna16_moe_backend, whose "
        f"map_wna16_backend accepts only {', '.join(choice.accepted)} and raises ValueError "
        f"(\"moe_backend='{backend}' is not supported for WNA16 MoE\") while the model is built "
        f"- the checkpoint's experts are {target.wna16_experts.describe()}",
        f"set {deployment.blame('--moe-backend')} to auto (vLLM picks its WNA16 kernel; Triton on ROCm)"
        f"{' or triton' if 'triton' in choice.accepted else ''}",
        f"--moe-backend {backend} on WNA16 experts",
    )


def check_cpu_wna16(deployment: Deployment, source: VllmSource, amx: bool | None = None) -> Findings:
    """vLLM-CPU's WNA16 MoE oracle (`_get_priority_backends`) offers only ZEN_CPU (gated by VLLM_CPU_INT4_W4A8,
    zentorch) and CPU (CPUExpertsInt4, which needs AMX tiles: `torch.cpu._is_amx_tile_supported()`). The rule reads
    both gates from the source and this host's /proc/cpuinfo (`amx`: what a test says the host has)."""
    target = deployment.target
    experts = None if target is None else target.wna16_experts
    if deployment.platform != "cpu" or experts is None:
        return []
    amx_at, zen_at = source.line_of(CPU_EXPERTS, AMX_PROBE), source.line_of(WNA16_ORACLE, ZEN_ENV)
    refused = f"vLLM stops while the model is built ('{NO_CPU_KERNEL}')"
    if amx_at is None and zen_at is None:
        return failed(
            f"the target's MoE experts are {experts.describe()} and {label(source)} has no CPU WNA16 MoE kernel "
            f"({CPU_EXPERTS} has no AMX path, {WNA16_ORACLE} no {ZEN_ENV} path): {refused}",
            "serve BF16 experts on CPU (FABRICATE_DEMO_MODELS=kimi); keep the INT4 demo for compatibility checks",
            "no CPU WNA16 MoE kernel",
        )
    amx = host_has_amx() if amx is None else amx
    if amx:
        return passed(f"WNA16 experts on CPU: this host has AMX tiles, CPUExpertsInt4 runs them ({amx_at})")
    if deployment.env_true(ZEN_ENV) and zen_at is not None:
        return warned(f"WNA16 experts on CPU through ZEN_CPU ({ZEN_ENV}=1, {zen_at}): needs zentorch")
    host = "this host's CPU has no amx_tile flag" if amx is False else "/proc/cpuinfo could not be read"
    return failed(
        f"the target's MoE experts are {experts.describe()}: vLLM-CPU runs them only with AMX tiles "
        f"(CPUExpertsInt4, {amx_at}) or {ZEN_ENV}=1 with zentorch ({zen_at}), and {host}: {refused}",
        "serve BF16 experts on this host (FABRICATE_DEMO_MODELS=kimi, configs/demo-cpu.env); the INT4 demo is "
        "for compatibility checks",
        "no CPU WNA16 MoE kernel on this host",
    )


RULES = (
    Rule(
        "moe backend",
        "--moe-backend fits the checkpoint's expert quantisation",
        "Kimi K2.6's routed experts are compressed-tensors WNA16 (int4, group 32). From 0.27.0 (0.25.0 on CUDA) the "
        "WNA16 method hands --moe-backend to select_wna16_moe_backend, and map_wna16_backend raises ValueError for "
        "anything it does not list (aiter) while the model is being built; 0.20-0.26 on ROCm ignore the flag and "
        "always run the Triton WNA16 kernel.",
        "the WNA16 MoE method class (compressed_tensors_moe/), whether it calls select_wna16_moe_backend, and the "
        "`mapping` in map_wna16_backend (fused_moe/oracle/int_wna16.py)",
        "MOE_BACKEND=auto",
        _check_wna16_moe_backend,
    ),
    Rule(
        "cpu wna16 kernel",
        "WNA16 (INT4) MoE experts on the CPU build have a kernel on this host",
        "vLLM-CPU runs WNA16 MoE experts only on AMX CPUs (CPUExpertsInt4) or through zentorch (ZEN_CPU); elsewhere "
        f"model construction raises '{NO_CPU_KERNEL}'. Found by the dry engine on demo-kimi-int4-cpu.env.",
        "CPUExpertsInt4._supports_current_device (fused_moe/experts/cpu_moe.py) and the VLLM_CPU_INT4_W4A8 gate "
        "(fused_moe/oracle/int_wna16.py); this host's /proc/cpuinfo",
        "BF16 experts on CPU (FABRICATE_DEMO_MODELS=kimi)",
        check_cpu_wna16,
    ),
)
