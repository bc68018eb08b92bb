"""KV-scale settings from the KIMI_DFLASH_KV_* environment the launch plan exports (docs/fp8-kv.md)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from kimi_dflash.core import envvars
from kimi_dflash.kvscale.fp8 import FORMATS, Fp8Format


class Mode(str, Enum):
    OFF = envvars.KV_SCALE_MODE_OFF
    DYNAMIC = "dynamic"  # running amax per layer -> k_scale, on the device
    CALIBRATED = "calibrated"  # per-layer scales from a JSON file, set once after weight loading
    OBSERVE = "observe"  # record per-layer amax (and dump it) without touching the scales


class KvScaleConfigError(ValueError):
    """A KV-scale setting is missing or malformed; the message names the variable and the fix."""


@dataclass(frozen=True)
class KvScaleSettings:
    mode: Mode = Mode.OFF
    scales_file: Path | None = None
    floor: float = envvars.DEFAULT_KV_SCALE_FLOOR
    warmup_steps: int = envvars.DEFAULT_KV_SCALE_WARMUP_STEPS
    observe_dir: Path | None = None
    observe_interval: float = envvars.DEFAULT_KV_OBSERVE_INTERVAL_S
    emulate_fp8: Fp8Format | None = None

    @property
    def active(self) -> bool:
        """Whether the hook has anything to do in this process."""
        return self.mode is not Mode.OFF or self.observe_dir is not None or self.emulate_fp8 is not None

    @property
    def sets_scales(self) -> bool:
        return self.mode in (Mode.DYNAMIC, Mode.CALIBRATED)


def _number(env: Mapping[str, str], name: str, default: float, whole: bool = False) -> float:
    """A finite number > 0, or with ``whole`` a whole number of steps >= 0."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        kind = "whole number of steps (0 = never freeze)" if whole else f"number; set it to e.g. {default}"
        raise KvScaleConfigError(f"{name}={raw!r} is not a {kind}") from None
    if (value < 0) if whole else (not math.isfinite(value) or value <= 0):
        wanted = ">= 0 (0 = the scale never freezes)" if whole else "a finite number > 0"
        raise KvScaleConfigError(f"{name}={raw!r} must be {wanted}")
    return value


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name, "").strip()
    return Path(raw).expanduser() if raw else None


def settings_from_env(env: Mapping[str, str] | None = None) -> KvScaleSettings:
    """Parse and check the KV-scale variables; raise KvScaleConfigError with the fix on bad input."""
    env = os.environ if env is None else env
    raw = env.get(envvars.KV_SCALE_MODE, "").strip().lower() or Mode.OFF.value
    try:
        mode = Mode(raw)
    except ValueError:
        choices = "|".join(m.value for m in Mode)
        raise KvScaleConfigError(f"{envvars.KV_SCALE_MODE}={raw!r} is not a KV scale mode; use {choices}") from None
    scales_file, observe_dir = _path(env, envvars.KV_SCALES_FILE), _path(env, envvars.KV_OBSERVE_DIR)
    if mode is Mode.CALIBRATED and scales_file is None:
        needs = f"{envvars.KV_SCALE_MODE}=calibrated needs {envvars.KV_SCALES_FILE} (KV_SCALES_FILE in the config)"
        raise KvScaleConfigError(f"{needs}: the JSON written by kimi-dflash calibrate-kv")
    if mode is Mode.OBSERVE and observe_dir is None:
        needs = f"{envvars.KV_SCALE_MODE}=observe needs {envvars.KV_OBSERVE_DIR}"
        raise KvScaleConfigError(f"{needs}: the directory each vLLM rank dumps its amax file to")

    emulate = env.get(envvars.KV_EMULATE_FP8, "").strip().lower()
    if emulate not in ("", "e4m3fn", "e4m3fnuz"):
        raise KvScaleConfigError(f"{envvars.KV_EMULATE_FP8}={emulate!r}: use e4m3fn or e4m3fnuz (or leave it unset)")

    return KvScaleSettings(
        mode=mode,
        scales_file=scales_file,
        floor=_number(env, envvars.KV_SCALE_FLOOR, envvars.DEFAULT_KV_SCALE_FLOOR),
        warmup_steps=int(_number(env, envvars.KV_SCALE_WARMUP_STEPS, envvars.DEFAULT_KV_SCALE_WARMUP_STEPS, True)),
        observe_dir=observe_dir,
        observe_interval=_number(env, envvars.KV_OBSERVE_INTERVAL, envvars.DEFAULT_KV_OBSERVE_INTERVAL_S),
        emulate_fp8=FORMATS[emulate] if emulate else None,
    )
