"""Adapters from the launcher to the preflight checks and the patcher (each owned by its own package)."""

from __future__ import annotations

from collections.abc import Callable

from kimi_dflash.config.validate import Config
from kimi_dflash.plan import LaunchPlan


def preflight(config: Config, plan: LaunchPlan, fix_numa: bool, say: Callable[[str], None]) -> bool:
    raise NotImplementedError("wired up when kimi_dflash.preflight lands")


def patches(config: Config, say: Callable[[str], None]) -> bool:
    if config["DEVICE"] == "cpu":
        say("patches: none needed on DEVICE=cpu")
        return True
    raise NotImplementedError("wired up when kimi_dflash.patcher lands")
