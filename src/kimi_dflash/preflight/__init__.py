"""Preflight: is this machine ready for the launch plan? Printed as pass / warn / fail lines, each fail with
its fix.

    from kimi_dflash.preflight import (PreflightRequest, exit_code, features_from_command,
                                       interpreter_for_command, render, run_preflight)
    request = PreflightRequest(device="rocm", tensor_parallel_size=8, expected_arch="gfx942",
                               required_features=features_from_command(argv, env),
                               python=interpreter_for_command(argv), ...)
    results = run_preflight(request)
    print(render(results)); sys.exit(exit_code(results))

Standard library only at import time (vLLM is imported in a child process when the checks run).
"""

from kimi_dflash.preflight.accelerators import Accelerator, normalize_arch
from kimi_dflash.preflight.host import CommandOutput, DiskSpace, HostProbe
from kimi_dflash.preflight.model_dir import check_model_dir
from kimi_dflash.preflight.plan_features import features_from_command
from kimi_dflash.preflight.render import render, summary_line
from kimi_dflash.preflight.request import DEFAULT_MIN_SHM_BYTES, Device, PreflightRequest, default_min_shm_bytes
from kimi_dflash.preflight.results import CheckResult, Status, exit_code
from kimi_dflash.preflight.run import run_preflight
from kimi_dflash.preflight.runtime_probe import RuntimeReport, interpreter_for_command, probe_runtime
from kimi_dflash.preflight.vllm_features import FeatureOutcome, parse_feature

__all__ = [
    "DEFAULT_MIN_SHM_BYTES",
    "Accelerator",
    "CheckResult",
    "CommandOutput",
    "Device",
    "DiskSpace",
    "FeatureOutcome",
    "HostProbe",
    "PreflightRequest",
    "RuntimeReport",
    "Status",
    "check_model_dir",
    "default_min_shm_bytes",
    "exit_code",
    "features_from_command",
    "interpreter_for_command",
    "normalize_arch",
    "parse_feature",
    "probe_runtime",
    "render",
    "run_preflight",
    "summary_line",
]
