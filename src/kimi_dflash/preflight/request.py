"""What the launch plan needs from this machine: the input of every preflight check."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from kimi_dflash.core.options import DEFAULT_PORT

if TYPE_CHECKING:
    from kimi_dflash.rules.deployment import Deployment
    from kimi_dflash.rules.engine import Verdict

Device = Literal["rocm", "cuda", "cpu"]
GIB = 1 << 30
# TP 8 over RCCL/NCCL exchanges through /dev/shm; the ROCm vLLM images are documented with `--shm-size 16G`.
# The CPU demo (TP 1) only needs vLLM's small shared-memory message queues.
DEFAULT_MIN_SHM_BYTES: dict[Device, int] = {"rocm": 16 * GIB, "cuda": 16 * GIB, "cpu": 256 << 20}


@dataclass(frozen=True)
class PreflightRequest:
    """The planned server as the checks see it, so that they never depend on the config schema."""

    device: Device  # "rocm" (MI300X), "cuda" (H200) or "cpu" (the demo on vLLM's CPU build)
    tensor_parallel_size: int = 1  # accelerators the plan needs (ignored on cpu)
    # The recipe's architecture: "gfx942" (MI300X), "sm_90" (H100/H200; "9.0", "sm90" too). None: not compared.
    expected_arch: str | None = None
    model_dir: Path | None = None  # checkpoint directories; None skips that check (a demo model fabricated later)
    draft_model_dir: Path | None = None
    model_repo_hint: str | None = None  # Hugging Face repo ids named in the download fix
    draft_repo_hint: str | None = None
    model_fix_hint: str | None = None  # free text replacing the download command in the fix (the demo's fabrication)
    draft_fix_hint: str | None = None
    host: str = "127.0.0.1"  # where the server will listen
    port: int = DEFAULT_PORT
    required_features: tuple[str, ...] = ()  # vLLM features the plan relies on (kimi_dflash.rules.features)
    fix_numa: bool = False  # set kernel.numa_balancing=0 when it is on and we are root
    min_shm_bytes: int | None = None  # /dev/shm size below which the check warns (cpu) or fails; None: default
    python: str | None = None  # the interpreter that will run vLLM (runtime_probe.interpreter_for_command)
    # The plan (command line, environment, checkpoints): judged by the compatibility rules. None: only the features.
    deployment: Deployment | None = None
    verdict: Verdict | None = None  # the deployment's, judged by the launcher (None: judged here on the vLLM found)
    # A pre-sharded checkpoint the plan loads and the dtype it serves: made from model_dir for this TP, vLLM and dtype.
    preshard_dir: Path | None = None
    dtype: str | None = None
    # What the runtime probe imports in that Python: a start leaves vllm to vLLM, which imports it first thing.
    imports: tuple[str, ...] = ("vllm", "torch")

    def __post_init__(self) -> None:
        # Programming errors in the adapter, not user input: the config was validated before this point.
        if self.device not in get_args(Device):
            raise ValueError(f"PreflightRequest.device must be one of {get_args(Device)}, got {self.device!r}")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"PreflightRequest.tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if isinstance(self.required_features, (str, bytes)):
            raise TypeError("PreflightRequest.required_features must be a tuple of feature names, not one string")
        from kimi_dflash.rules.features import parse_feature

        for name in self.required_features:
            parse_feature(name)  # raises ValueError naming the grammar

    @property
    def on_gpu(self) -> bool:
        return self.device != "cpu"

    @property
    def platform_name(self) -> str:
        return {"rocm": "ROCm", "cuda": "CUDA", "cpu": "CPU"}[self.device]  # as the vendors write them

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable
