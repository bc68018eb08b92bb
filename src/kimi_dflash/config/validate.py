"""Turn raw settings into a typed, validated Config, or a ConfigError listing every problem (one per mistake)."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.checkpoint import Facts
from kimi_dflash.config.convert import convert
from kimi_dflash.config.loader import RawSetting, display_path, read_settings
from kimi_dflash.config.problems import ConfigError, Problem
from kimi_dflash.config.rules import RULES, Check, path_problems
from kimi_dflash.config.schema import KEYS, KEYS_BY_NAME, ConfigValues


@dataclass(frozen=True)
class Config:
    """Typed values, where each came from (by key name), and the warnings its rules found."""

    path: Path
    typed: ConfigValues
    sources: Mapping[str, str]
    warnings: tuple[Problem, ...] = ()

    def __getitem__(self, key: str) -> object:
        """By key name, for code that walks the schema; elsewhere ``config.typed.<key>``, which carries its type."""
        return getattr(self.typed, KEYS_BY_NAME[key].attribute)

    @property
    def values(self) -> dict[str, object]:
        return {key.name: getattr(self.typed, key.attribute) for key in KEYS}

    def with_values(self, source: str, **overrides: object) -> Config:
        typed = dataclasses.replace(self.typed, **{KEYS_BY_NAME[k].attribute: v for k, v in overrides.items()})
        return Config(self.path, typed, {**self.sources, **dict.fromkeys(overrides, source)}, self.warnings)

    @property
    def demo_models(self) -> str | None:
        return self.typed.demo_models


def check_paths(config: Config, facts: Facts) -> list[Problem]:
    """Problems with the files a config names: missing dirs, spec tokens vs the drafter's block size."""
    return list(path_problems(Check(config.typed, config.sources), facts))


def typed_values(values: Mapping[str, str]) -> ConfigValues:
    """Config values kept as text (qualify's) typed as a config file's are, the schema's default for a key absent;
    other names ignored. ValueError on a value a config would refuse."""
    typed: dict[str, object] = {}
    for spec in (KEYS_BY_NAME[name] for name in values if name in KEYS_BY_NAME):
        value, problem = convert(spec, RawSetting(spec.name, values[spec.name], "values", Path.cwd()))
        if problem is not None:
            raise ValueError(problem.render())
        typed[spec.attribute] = value
    return ConfigValues(**typed)  # type: ignore[arg-type]  # each value converted to its key's declared type


def load_config(path: Path | str, environ: Mapping[str, str] | None = None) -> Config:
    path = Path(path)
    settings = read_settings(path, environ)
    problems: list[Problem] = []
    values: dict[str, object] = {}
    # A rule may blame a key left at its default: name the file and say so.
    sources: dict[str, str] = {key.name: f"{display_path(path)} (default)" for key in KEYS}
    for name, setting in settings.items():
        spec = KEYS_BY_NAME.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, KEYS_BY_NAME, n=1, cutoff=0.6)
            fix = f"did you mean {close[0]}?" if close else "remove it; known keys are listed in docs/configuration.md"
            problems.append(Problem(setting.source, name, setting.value, "unknown key", fix))
            continue
        value, problem = convert(spec, setting)
        if problem is not None:
            problems.append(problem)
            continue
        values[spec.attribute] = value
        sources[name] = setting.source
    if problems:  # combination rules would only repeat the noise of bad single values
        raise ConfigError(problems)

    typed = ConfigValues(**values)  # type: ignore[arg-type]  # each value converted to its key's declared type
    problems = [problem for rule in RULES for problem in rule(Check(typed, sources))]
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise ConfigError(errors)
    return Config(path, typed, sources, tuple(p for p in problems if p.severity != "error"))


__all__ = ["Config", "ConfigError", "Problem", "load_config", "typed_values", "check_paths", "display_path"]
