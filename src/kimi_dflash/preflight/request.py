"""What the launch plan needs from this machine: the input of every preflight check.

The launcher adapts its config into this object, so the checks never depend on the config schema.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kimi_dflash.rules.deployment import Deployment

Device = Literal["rocm", "cuda", "cpu"]
DEVICES: tuple[Device, ...] = get_args(Device)
GPU_DEVICES: tuple[Device, ...] = ("rocm", "cuda")

# How the vendors write their platform names, for messages ("the ROCm build").
PLATFORM_NAMES: dict[Device, str] = {"rocm": "ROCm", "cuda": "CUDA", "cpu": "CPU"}

GIB = 1 << 30
MIB = 1 << 20

# TP 8 over RCCL/NCCL exchanges through /dev/shm; the ROCm vLLM images are documented with `--shm-size 16G`.
# The CPU demo (TP 1) only needs vLLM's small shared-memory message queues.
DEFAULT_MIN_SHM_BYTES: dict[Device, int] = {"rocm": 16 * GIB, "cuda": 16 * GIB, "cpu": 256 * MIB}


def default_min_shm_bytes(device: Device) -> int:
    return DEFAULT_MIN_SHM_BYTES[device]


@dataclass(frozen=True)
class PreflightRequest:
    """Everything the checks need to know about the planned server.

    - device: "rocm" (MI300X), "cuda" (H200) or "cpu" (the demo on vLLM's CPU build).
    - tensor_parallel_size: accelerators the plan needs (ignored on cpu).
    - expected_arch: accelerator architecture the recipe was built for, written as the vendor names it:
      "gfx942" for MI300X (amd-smi / rocm-smi "GFX Version"), "sm_90" for H100/H200 (nvidia-smi compute_cap
      9.0; "9.0" and "sm90" are accepted too). None skips the arch comparison.
    - model_dir / draft_model_dir: checkpoint directories; None skips that check (e.g. a demo model that is
      fabricated on first start).
    - model_repo_hint / draft_repo_hint: Hugging Face repo ids named in the download fix.
    - model_fix_hint / draft_fix_hint: free text that replaces the download command in the fix (e.g. how the
      demo fabricates its models).
    - host / port: where the server will listen.
    - required_features: vLLM feature probes the plan relies on (see kimi_dflash.rules.features).
    - fix_numa: set kernel.numa_balancing=0 when it is on and we are root.
    - min_shm_bytes: /dev/shm size below which the check warns (cpu) or fails (GPU); None = device default.
    - python: the interpreter that will run vLLM (see runtime_probe.interpreter_for_command); None = this one.
    - deployment: the planned command line, environment and checkpoint facts; when given, the vLLM found is
      judged by the compatibility rules (kimi_dflash.rules) and the project's plugin must load if the plan
      relies on it. None: only `required_features` are probed.
    - preshard_dir / dtype: a pre-sharded checkpoint the plan loads (sharded_state) and the dtype it serves in;
      it must have been made from model_dir for this TP size, vLLM version and dtype.
    """

    device: Device
    tensor_parallel_size: int = 1
    expected_arch: str | None = None
    model_dir: Path | None = None
    draft_model_dir: Path | None = None
    model_repo_hint: str | None = None
    draft_repo_hint: str | None = None
    model_fix_hint: str | None = None
    draft_fix_hint: str | None = None
    host: str = "127.0.0.1"
    port: int = 8262
    required_features: tuple[str, ...] = ()
    fix_numa: bool = False
    min_shm_bytes: int | None = None
    python: str | None = None
    deployment: Deployment | None = None
    preshard_dir: Path | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        # Programming errors in the adapter, not user input: the config was validated before this point.
        if self.device not in DEVICES:
            raise ValueError(f"PreflightRequest.device must be one of {DEVICES}, got {self.device!r}")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"PreflightRequest.tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if isinstance(self.required_features, (str, bytes)):
            raise TypeError("PreflightRequest.required_features must be a tuple of feature names, not one string")
        from kimi_dflash.rules.features import parse_feature

        for name in self.required_features:
            parse_feature(name)  # raises ValueError naming the grammar

    @property
    def on_gpu(self) -> bool:
        return self.device in GPU_DEVICES

    @property
    def platform_name(self) -> str:
        return PLATFORM_NAMES[self.device]

    @property
    def vllm_env(self) -> Mapping[str, str] | None:
        """The environment vLLM will run with (inherited + the plan's), when known."""
        return None if self.deployment is None else self.deployment.env

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    @property
    def shm_threshold(self) -> int:
        return default_min_shm_bytes(self.device) if self.min_shm_bytes is None else self.min_shm_bytes
