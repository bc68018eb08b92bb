"""KIMI_DFLASH_KV_* environment parsing: defaults, and errors that name the variable and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_dflash.core.envvars import (
    DEFAULT_KV_SCALE_FLOOR,
    KV_EMULATE_FP8,
    KV_OBSERVE_DIR,
    KV_OBSERVE_INTERVAL,
    KV_SCALE_FLOOR,
    KV_SCALE_MODE,
    KV_SCALE_WARMUP_STEPS,
    KV_SCALES_FILE,
)
from kimi_dflash.kvscale.settings import KvScaleConfigError, Mode, settings_from_env


def test_defaults_are_off_and_inactive() -> None:
    settings = settings_from_env({})
    assert settings.mode is Mode.OFF and not settings.active and not settings.sets_scales
    assert settings.floor == DEFAULT_KV_SCALE_FLOOR and settings.warmup_steps == 0


def test_full_dynamic_configuration() -> None:
    settings = settings_from_env(
        {
            KV_SCALE_MODE: " Dynamic ",
            KV_SCALE_FLOOR: "0.002",
            KV_SCALE_WARMUP_STEPS: "500",
            KV_OBSERVE_DIR: "/tmp/obs",
            KV_OBSERVE_INTERVAL: "0.5",
        }
    )
    assert settings.mode is Mode.DYNAMIC and settings.active and settings.sets_scales
    assert settings.floor == 0.002 and settings.warmup_steps == 500
    assert settings.observe_dir == Path("/tmp/obs") and settings.observe_interval == 0.5


def test_calibrated_needs_a_file() -> None:
    with pytest.raises(KvScaleConfigError, match=KV_SCALES_FILE):
        settings_from_env({KV_SCALE_MODE: "calibrated"})
    settings = settings_from_env({KV_SCALE_MODE: "calibrated", KV_SCALES_FILE: "/x/scales.json"})
    assert settings.scales_file == Path("/x/scales.json")


def test_observe_needs_a_directory() -> None:
    with pytest.raises(KvScaleConfigError, match=KV_OBSERVE_DIR):
        settings_from_env({KV_SCALE_MODE: "observe"})


@pytest.mark.parametrize(
    "env, names",
    [
        ({KV_SCALE_MODE: "fast"}, [KV_SCALE_MODE, "off|dynamic|calibrated|observe"]),
        ({KV_SCALE_FLOOR: "tiny"}, [KV_SCALE_FLOOR]),
        ({KV_SCALE_FLOOR: "0"}, [KV_SCALE_FLOOR, "> 0"]),
        ({KV_SCALE_FLOOR: "nan"}, [KV_SCALE_FLOOR]),
        ({KV_SCALE_WARMUP_STEPS: "1.5"}, [KV_SCALE_WARMUP_STEPS]),
        ({KV_SCALE_WARMUP_STEPS: "-3"}, [KV_SCALE_WARMUP_STEPS, ">= 0"]),
        ({KV_OBSERVE_INTERVAL: "-1"}, [KV_OBSERVE_INTERVAL]),
        ({KV_EMULATE_FP8: "e5m2"}, [KV_EMULATE_FP8, "e4m3fn"]),
    ],
)
def test_bad_values_are_refused_with_the_variable_named(env: dict[str, str], names: list[str]) -> None:
    with pytest.raises(KvScaleConfigError) as error:
        settings_from_env(env)
    for name in names:
        assert name in str(error.value)


def test_emulation_alone_activates_the_hook() -> None:
    settings = settings_from_env({KV_EMULATE_FP8: "E4M3FNUZ"})
    assert settings.active and settings.mode is Mode.OFF and settings.emulate_fp8.max_value == 240.0
