"""KIMI_DFLASH_KV_* environment parsing: defaults, and errors that name the variable and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_dflash.kvscale.settings import (
    DEFAULT_FLOOR,
    ENV_EMULATE,
    ENV_FILE,
    ENV_FLOOR,
    ENV_MODE,
    ENV_OBSERVE_DIR,
    ENV_OBSERVE_INTERVAL,
    ENV_WARMUP,
    KvScaleConfigError,
    Mode,
    settings_from_env,
)


def test_defaults_are_off_and_inactive() -> None:
    settings = settings_from_env({})
    assert settings.mode is Mode.OFF and not settings.active and not settings.sets_scales
    assert settings.floor == DEFAULT_FLOOR and settings.warmup_steps == 0


def test_full_dynamic_configuration() -> None:
    settings = settings_from_env({ENV_MODE: " Dynamic ", ENV_FLOOR: "0.002", ENV_WARMUP: "500",
                                  ENV_OBSERVE_DIR: "/tmp/obs", ENV_OBSERVE_INTERVAL: "0.5"})
    assert settings.mode is Mode.DYNAMIC and settings.active and settings.sets_scales
    assert settings.floor == 0.002 and settings.warmup_steps == 500
    assert settings.observe_dir == Path("/tmp/obs") and settings.observe_interval == 0.5


def test_calibrated_needs_a_file() -> None:
    with pytest.raises(KvScaleConfigError, match=ENV_FILE):
        settings_from_env({ENV_MODE: "calibrated"})
    settings = settings_from_env({ENV_MODE: "calibrated", ENV_FILE: "/x/scales.json"})
    assert settings.scales_file == Path("/x/scales.json")


def test_observe_needs_a_directory() -> None:
    with pytest.raises(KvScaleConfigError, match=ENV_OBSERVE_DIR):
        settings_from_env({ENV_MODE: "observe"})


@pytest.mark.parametrize("env, names", [
    ({ENV_MODE: "fast"}, [ENV_MODE, "off|dynamic|calibrated|observe"]),
    ({ENV_FLOOR: "tiny"}, [ENV_FLOOR]),
    ({ENV_FLOOR: "0"}, [ENV_FLOOR, "> 0"]),
    ({ENV_FLOOR: "nan"}, [ENV_FLOOR]),
    ({ENV_WARMUP: "1.5"}, [ENV_WARMUP]),
    ({ENV_WARMUP: "-3"}, [ENV_WARMUP, ">= 0"]),
    ({ENV_OBSERVE_INTERVAL: "-1"}, [ENV_OBSERVE_INTERVAL]),
    ({ENV_EMULATE: "e5m2"}, [ENV_EMULATE, "e4m3fn"]),
])
def test_bad_values_are_refused_with_the_variable_named(env: dict[str, str], names: list[str]) -> None:
    with pytest.raises(KvScaleConfigError) as error:
        settings_from_env(env)
    for name in names:
        assert name in str(error.value)


def test_emulation_alone_activates_the_hook() -> None:
    settings = settings_from_env({ENV_EMULATE: "E4M3FNUZ"})
    assert settings.active and settings.mode is Mode.OFF and settings.emulate_fp8.max_value == 240.0
