"""The configs shipped inside the package, for installs without a checkout: src/kimi_dflash/configs is a symlink to
../../configs (one copy), and the wheel build copies the files it points at."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DEFAULT_CONFIG = "production.env"


def shipped_configs_dir() -> Path:
    # An installed package is a plain directory (not a zip): a real path, EXTENDS resolving beside it.
    return Path(str(resources.files("kimi_dflash") / "configs"))


def shipped_config_names() -> list[str]:
    directory = shipped_configs_dir()
    return sorted(p.name for p in directory.glob("*.env")) if directory.is_dir() else []


def resolve_config_argument(argument: str | None) -> Path:
    """A config given on the command line: an existing path, else the name of a shipped config (with or
    without .env), else the path as given (the loader then reports it missing, listing the shipped names)."""
    if argument is None:
        return shipped_configs_dir() / DEFAULT_CONFIG
    path = Path(argument)
    if path.exists() or path.parent != Path("."):
        return path
    shipped = shipped_configs_dir() / (argument if argument.endswith(".env") else f"{argument}.env")
    return shipped if shipped.is_file() else path
