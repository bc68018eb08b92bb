"""A config problem: one per mistake, naming where, which key, which value, and the fix."""

from __future__ import annotations

from dataclasses import dataclass

from kimi_dflash.config.schema import KEYS_BY_NAME


@dataclass(frozen=True)
class Problem:
    source: str  # "configs/x.env:12", "environment", ...
    key: str | None
    value: str | None
    message: str
    fix: str
    severity: str = "error"  # "error" stops the launch; "warning" is printed and the launch goes on

    def render(self) -> str:
        where = self.source
        if self.key is not None:
            known = self.key in KEYS_BY_NAME and self.value is not None
            shown = KEYS_BY_NAME[self.key].shown(self.value) if known else self.value  # never a secret's value
            where += f": {self.key}" + (f"={shown}" if shown is not None else "")
        return f"{self.severity}: {where}: {self.message}\n  fix: {self.fix}"


class ConfigError(Exception):
    """Raised with every problem found, so the user fixes them all in one round."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(p.render() for p in problems))
