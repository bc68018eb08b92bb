"""Pre-launch checks of the KV-scale settings: inside vLLM a mistake costs a model load and a traceback."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kimi_dflash.core.checks import CheckResult, failed, passed, warned
from kimi_dflash.kvscale import scales_file
from kimi_dflash.kvscale.fp8 import E4M3_KV_DTYPES
from kimi_dflash.kvscale.settings import KvScaleConfigError, Mode, settings_from_env

NAME = "kv scales"
FIX = ""  # the settings' and the scales file's errors each name their fix


def check_kv_scale_config(
    env: Mapping[str, str], *, model: str, kv_cache_dtype: str, fingerprint: Mapping[str, Any] | None = None
) -> list[CheckResult]:
    """Findings for the KIMI_DFLASH_KV_* variables a launch exports (fingerprint: the target's; None: by name)."""
    try:
        settings = settings_from_env(env)
    except KvScaleConfigError as error:
        return [failed(str(error), FIX, name=NAME)]
    fp8 = kv_cache_dtype in E4M3_KV_DTYPES
    findings: list[CheckResult] = []
    if fp8 and settings.mode in (Mode.OFF, Mode.OBSERVE):
        risk = (
            f"KV_CACHE_DTYPE={kv_cache_dtype} with KV_SCALE_MODE={settings.mode.value}: unless the checkpoint "
            "ships KV scales, vLLM uses k_scale=1.0 and MLA latents lose precision or clip"
        )
        findings.append(warned(risk, "set KV_SCALE_MODE=calibrated or dynamic", name=NAME))
    # Scales without an FP8 cache: config validation (config/rules.py) warns, with file:line, before this runs.
    if settings.mode is Mode.CALIBRATED:
        assert settings.scales_file is not None
        try:
            scales = scales_file.load_scales_file(settings.scales_file)
            identity = scales_file.ModelIdentity(model, None if fingerprint is None else dict(fingerprint))
            scales_file.check_model_match(scales, identity)
        except scales_file.KvScalesFileError as error:
            return [*findings, failed(str(error), FIX, name=NAME)]
        low, high = min(s.scale for s in scales.layers.values()), max(s.scale for s in scales.layers.values())
        shown = (
            f"{len(scales.layers)} layers of {scales.model.model}, k_scale {low:.4g}-{high:.4g} ({scales.fp8_format})"
        )
        findings.append(passed(f"KV scales file {scales.path}: {shown}", name=NAME))
    elif settings.mode is Mode.DYNAMIC and fp8:
        warmup = settings.warmup_steps or "none (never frozen)"
        shown = f"per-layer running amax, floor {settings.floor:g}, warm-up {warmup}"
        findings.append(passed(f"dynamic KV scales: {shown}", name=NAME))
    return findings
