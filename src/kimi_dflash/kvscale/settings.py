"""KV-scale settings, read from the environment the launch plan exports to every vLLM process.

config key               environment variable                       default
KV_SCALE_MODE            KIMI_DFLASH_KV_SCALE_MODE                  off   (dynamic|calibrated|observe|off)
KV_SCALES_FILE           KIMI_DFLASH_KV_SCALES_FILE                 -     (required by calibrated)
KV_SCALE_FLOOR           KIMI_DFLASH_KV_SCALE_FLOOR                 1e-4
KV_SCALE_WARMUP_STEPS    KIMI_DFLASH_KV_SCALE_WARMUP_STEPS          0     (0 = the scale never freezes)
KV_OBSERVE_DIR           KIMI_DFLASH_KV_OBSERVE_DIR                 -     (required by observe)
KV_OBSERVE_INTERVAL      KIMI_DFLASH_KV_OBSERVE_INTERVAL            2.0   seconds between dumps
KV_EMULATE_FP8           KIMI_DFLASH_KV_EMULATE_FP8                 -     (e4m3fn|e4m3fnuz; CPU test aid)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from kimi_dflash.kvscale.fp8 import FORMATS, Fp8Format

ENV_MODE = "KIMI_DFLASH_KV_SCALE_MODE"
ENV_FILE = "KIMI_DFLASH_KV_SCALES_FILE"
ENV_FLOOR = "KIMI_DFLASH_KV_SCALE_FLOOR"
ENV_WARMUP = "KIMI_DFLASH_KV_SCALE_WARMUP_STEPS"
ENV_OBSERVE_DIR = "KIMI_DFLASH_KV_OBSERVE_DIR"
ENV_OBSERVE_INTERVAL = "KIMI_DFLASH_KV_OBSERVE_INTERVAL"
ENV_EMULATE = "KIMI_DFLASH_KV_EMULATE_FP8"

# Far below any scale a real MLA checkpoint needs (Kimi K2.6 converges to 0.026-0.068), but keeps a
# first write of zeros (vLLM's dummy warm-up batches) from producing a zero scale.
DEFAULT_FLOOR = 1e-4
DEFAULT_OBSERVE_INTERVAL = 2.0


class Mode(str, Enum):
    OFF = "off"
    DYNAMIC = "dynamic"  # running amax per layer -> k_scale, on the device
    CALIBRATED = "calibrated"  # per-layer scales from a JSON file, set once after weight loading
    OBSERVE = "observe"  # record per-layer amax (and dump it) without touching the scales


class KvScaleConfigError(ValueError):
    """A KV-scale setting is missing or malformed; the message names the variable and the fix."""


@dataclass(frozen=True)
class KvScaleSettings:
    mode: Mode = Mode.OFF
    scales_file: Path | None = None
    floor: float = DEFAULT_FLOOR
    warmup_steps: int = 0
    observe_dir: Path | None = None
    observe_interval: float = DEFAULT_OBSERVE_INTERVAL
    emulate_fp8: Fp8Format | None = None

    @property
    def active(self) -> bool:
        """Whether the hook has anything to do in this process."""
        return self.mode is not Mode.OFF or self.observe_dir is not None or self.emulate_fp8 is not None

    @property
    def sets_scales(self) -> bool:
        return self.mode in (Mode.DYNAMIC, Mode.CALIBRATED)


def _float(env: Mapping[str, str], name: str, default: float, *, minimum_exclusive: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise KvScaleConfigError(f"{name}={raw!r} is not a number; set it to e.g. {default}") from None
    if not math.isfinite(value) or value <= minimum_exclusive:
        raise KvScaleConfigError(f"{name}={raw!r} must be a finite number > {minimum_exclusive}")
    return value


def settings_from_env(env: Mapping[str, str] | None = None) -> KvScaleSettings:
    """Parse and check the KV-scale variables; raise KvScaleConfigError with the fix on bad input."""
    env = os.environ if env is None else env
    raw_mode = env.get(ENV_MODE, "").strip().lower() or Mode.OFF.value
    try:
        mode = Mode(raw_mode)
    except ValueError:
        choices = "|".join(m.value for m in Mode)
        raise KvScaleConfigError(f"{ENV_MODE}={raw_mode!r} is not a KV scale mode; use one of {choices}") from None

    raw_file = env.get(ENV_FILE, "").strip()
    scales_file = Path(raw_file).expanduser() if raw_file else None
    if mode is Mode.CALIBRATED and scales_file is None:
        raise KvScaleConfigError(
            f"{ENV_MODE}=calibrated needs {ENV_FILE} (KV_SCALES_FILE in the config): the JSON written by "
            "payload/calibrate_kv_scales.py")

    floor = _float(env, ENV_FLOOR, DEFAULT_FLOOR, minimum_exclusive=0.0)

    raw_warmup = env.get(ENV_WARMUP, "").strip()
    try:
        warmup = int(raw_warmup) if raw_warmup else 0
    except ValueError:
        raise KvScaleConfigError(f"{ENV_WARMUP}={raw_warmup!r} is not a whole number of steps (0 = never freeze)") from None
    if warmup < 0:
        raise KvScaleConfigError(f"{ENV_WARMUP}={warmup} must be >= 0 (0 = the scale never freezes)")

    raw_dir = env.get(ENV_OBSERVE_DIR, "").strip()
    observe_dir = Path(raw_dir).expanduser() if raw_dir else None
    if mode is Mode.OBSERVE and observe_dir is None:
        raise KvScaleConfigError(
            f"{ENV_MODE}=observe needs {ENV_OBSERVE_DIR}: the directory each vLLM rank dumps its amax file to")

    interval = _float(env, ENV_OBSERVE_INTERVAL, DEFAULT_OBSERVE_INTERVAL, minimum_exclusive=0.0)

    raw_emulate = env.get(ENV_EMULATE, "").strip().lower()
    emulate = None
    if raw_emulate:
        if raw_emulate not in ("e4m3fn", "e4m3fnuz"):
            raise KvScaleConfigError(f"{ENV_EMULATE}={raw_emulate!r}: use e4m3fn or e4m3fnuz (or leave it unset)")
        emulate = FORMATS[raw_emulate]

    return KvScaleSettings(mode=mode, scales_file=scales_file, floor=floor, warmup_steps=warmup,
                           observe_dir=observe_dir, observe_interval=interval, emulate_fp8=emulate)
