"""The sweep's points: the cartesian product of ``--grid KEY=v1,v2,...`` options over config keys (pure)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from kimi_dflash.config.schema import KEY, KEYS_BY_NAME
from kimi_dflash.core.errors import UserError

# Keys a sweep must not vary: they decide where the server listens, or carry a secret.
FORBIDDEN = {KEY.PORT, KEY.HOST, KEY.API_KEY}


@dataclass(frozen=True)
class Axis:
    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Point:
    overrides: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        """A file-name-safe, stable identifier, e.g. ``NUM_SPECULATIVE_TOKENS-4``."""
        parts = [f"{key}-{value}" for key, value in self.overrides] or ["config"]
        return re.sub(r"[^A-Za-z0-9._-]+", "_", "__".join(parts))

    @property
    def label(self) -> str:
        return " ".join(f"{key}={value}" for key, value in self.overrides) or "(config as is)"

    def server_env(self, method: str = "dflash") -> dict[str, str]:
        """Overrides for serve.sh: NUM_SPECULATIVE_TOKENS=0 is the baseline, a positive count serves ``method``."""
        env = dict(self.overrides)
        if KEY.NUM_SPECULATIVE_TOKENS in env:
            if int(env[KEY.NUM_SPECULATIVE_TOKENS]) == 0:
                del env[KEY.NUM_SPECULATIVE_TOKENS]
                env[KEY.SPECULATIVE_METHOD] = "none"
            else:
                env.setdefault(KEY.SPECULATIVE_METHOD, method)
        return env


def parse_axis(text: str) -> Axis:
    """``KEY=v1,v2,...`` -> Axis, with errors that name the fix."""
    key, sep, values_text = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"--grid {text!r}: expected KEY=v1,v2,... (e.g. --grid NUM_SPECULATIVE_TOKENS=0,2,4).")
    if key not in KEYS_BY_NAME:
        raise UserError(f"--grid {key}: not a config key; docs/configuration.md lists the keys.")
    if key in FORBIDDEN:
        raise UserError(f"--grid {key}: the sweep picks ports itself and never varies {', '.join(sorted(FORBIDDEN))}.")
    if not (values := tuple(dict.fromkeys(v.strip() for v in values_text.split(",") if v.strip()))):
        raise UserError(f"--grid {key}=: no values; give at least one, e.g. --grid {key}=a,b.")
    if key == KEY.NUM_SPECULATIVE_TOKENS:
        for value in values:
            if not value.isdigit():
                raise UserError(f"--grid {key}={value}: expected a count >= 0 (0 = no speculative decoding).")
    return Axis(key, values)


def points(axes: Sequence[Axis]) -> list[Point]:
    """Every combination, in the order the axes and values were given."""
    keys = [axis.key for axis in axes]
    if len(set(keys)) != len(keys):
        raise UserError("--grid: a key is given twice; put all its values in one --grid KEY=v1,v2.")
    return [Point(tuple(zip(keys, combo))) for combo in itertools.product(*(axis.values for axis in axes))]
