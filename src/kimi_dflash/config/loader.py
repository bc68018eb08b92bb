"""Read env-file configs with python-dotenv's parser (never a shell), follow EXTENDS chains, apply process-env
overrides: raw string settings with where each came from (typing and validation: validate.py)."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dotenv.parser import parse_stream
from dotenv.variables import parse_variables

from kimi_dflash.config.problems import ConfigError, Problem
from kimi_dflash.config.schema import EXTENDS_KEY, KEYS_BY_NAME
from kimi_dflash.config.shipped import shipped_config_names
from kimi_dflash.core.user_files import UnreadableFile, read_user_text

MAX_EXTENDS_DEPTH = 8
MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class RawSetting:
    key: str
    value: str
    source: str  # "configs/production.env:12" or "environment"
    base_dir: Path  # relative paths in this value resolve against it


def display_path(path: Path) -> str:
    """Path as the user would type it: relative to the working directory when below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, RuntimeError, OSError):  # not below the cwd; a symlink loop
        return str(path)


def _interpolate(value: str, known: Mapping[str, str]) -> str:
    # ${VAR} / ${VAR:-default}, resolved against earlier keys and the process environment.
    return "".join(atom.resolve(dict(known)) or "" for atom in parse_variables(value))  # type: ignore[arg-type]


def _read_file(path: Path, problems: list[Problem]) -> list[RawSetting]:
    shown = display_path(path)
    try:
        text = read_user_text(path, what="config", max_bytes=MAX_CONFIG_BYTES)
    except UnreadableFile as exc:
        message, fix = f"cannot read config file: {str(exc).split(': ', 1)[-1]}", "pass an env file (UTF-8 text)"
        if not os.path.lexists(path):
            names = ", ".join(name.removesuffix(".env") for name in shipped_config_names()) or "none found"
            message = "config file not found"
            fix = f"pass an existing env file, or the name of a shipped config ({names})"
        problems.append(Problem(shown, None, None, message, fix))
        return []

    settings: list[RawSetting] = []
    seen: dict[str, int] = {}
    for binding in parse_stream(io.StringIO(text)):
        key, value, line = binding.key, binding.value, binding.original.line
        where = f"{shown}:{line}"
        if binding.error:
            message = f"cannot parse line {binding.original.string.strip()[:60]!r}"
            fix = "write KEY=value (quote values with spaces; comments start with #)"
            problems.append(Problem(where, None, None, message, fix))
        elif key is None:
            continue  # blank line or comment
        elif value is None:
            or_else = "delete the line" if key == EXTENDS_KEY else f"{key}= to leave it unset"
            fix = f"write {key}=<value>, or {or_else}"
            problems.append(Problem(where, key, None, "key without a value", fix))
        elif key in seen:
            message = f"set twice in one file (first on line {seen[key]})"
            problems.append(Problem(where, key, value, message, "keep one assignment per key"))
        else:
            seen[key] = line
            settings.append(RawSetting(key, value, where, path.parent))
    return settings


def _read_chain(path: Path, problems: list[Problem], visiting: tuple[Path, ...] = ()) -> dict[str, RawSetting]:
    try:
        resolved = path.resolve()
    except (RuntimeError, OSError) as exc:  # Python < 3.13 raises RuntimeError on a symlink loop
        fix = "fix the symlink (it loops or is broken)"
        problems.append(Problem(display_path(path), None, None, f"cannot resolve the config path ({exc})", fix))
        return {}
    if resolved in visiting:
        chain = " -> ".join(display_path(p) for p in (*visiting, resolved))
        problems.append(Problem(display_path(path), EXTENDS_KEY, None, f"EXTENDS loops: {chain}", "remove the cycle"))
        return {}
    if len(visiting) > MAX_EXTENDS_DEPTH:
        fix = f"keep chains at most {MAX_EXTENDS_DEPTH} files long"
        problems.append(Problem(display_path(path), EXTENDS_KEY, None, "EXTENDS chain too deep", fix))
        return {}

    own = _read_file(path, problems)
    merged: dict[str, RawSetting] = {}
    for setting in own:
        if setting.key == EXTENDS_KEY and not setting.value.strip():
            # Path("") is the config's own directory: without this, "is a directory" with no key named.
            fix = f"write {EXTENDS_KEY}=<base config, a path relative to this file>, or delete the line"
            problems.append(
                Problem(setting.source, EXTENDS_KEY, setting.value, "empty value: names no base config", fix)
            )
        elif setting.key == EXTENDS_KEY:
            base = Path(setting.value)
            base = base if base.is_absolute() else path.parent / base
            merged = _read_chain(base, problems, (*visiting, resolved))
    for setting in own:
        if setting.key != EXTENDS_KEY:
            merged[setting.key] = setting
    return merged


def read_settings(path: Path, environ: Mapping[str, str] | None = None) -> dict[str, RawSetting]:
    """EXTENDS chain, then environment overrides. ConfigError on unreadable input; bad values: validate.py."""
    environ = os.environ if environ is None else environ
    problems: list[Problem] = []
    merged = _read_chain(path, problems)
    if problems:
        raise ConfigError(problems)

    # The environment overrides the files for one run, for the schema's keys only (never PATH, HOME, ...).
    for key in KEYS_BY_NAME:
        if key in environ:
            merged[key] = RawSetting(key, environ[key], "environment", Path.cwd())

    known: dict[str, str] = dict(environ)
    interpolated: dict[str, RawSetting] = {}
    for key, setting in merged.items():
        value = _interpolate(setting.value, known) if "$" in setting.value else setting.value
        known[key] = value
        interpolated[key] = RawSetting(key, value, setting.source, setting.base_dir)
    return interpolated
