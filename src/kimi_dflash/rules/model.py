"""What a rule is (its findings are core/checks.py's CheckResult); each rule is declared once, in a module of
rules/catalog/."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kimi_dflash.core.checks import CheckResult

if TYPE_CHECKING:
    from kimi_dflash.rules.deployment import Deployment
    from kimi_dflash.rules.source import VllmSource


Findings = CheckResult | Iterable[CheckResult]  # one finding, or any number (a list, a generator)
Check = Callable[["Deployment", "VllmSource"], Findings]  # findings named by the engine (the rule id)


@dataclass(frozen=True)
class Fact:
    """One column of docs/compatibility.md's runtime-facts table; its cell for one release (production.env's plan):
    what `read` returns, a text or where the release has the fact (a SourceLine; None: absent)."""

    label: str
    read: Callable[[VllmSource, Deployment], object]

    def cell(self, source: VllmSource, deployment: Deployment) -> str:
        found = self.read(source, deployment)
        return found if isinstance(found, str) else "absent" if found is None else f"`{found}`"


@dataclass(frozen=True)
class Rule:
    id: str
    title: str  # what it checks, in a line
    why: str
    reads: str  # what the check reads in vLLM's source (and elsewhere: the checkpoint, this host)
    fix: str  # the general fix; each finding carries the specific one
    check: Check
    # Why vLLM's own start-up code (the dry engine) cannot show what this rule finds: a runtime trap, a plan vLLM
    # starts and then runs wrong or slow. Empty: start-up refuses such a plan too, and the two must agree.
    silent_at_startup: str = ""
    upstream: tuple[str, ...] = ()  # issues and PRs, e.g. "vllm #47930"
    facts: tuple[Fact, ...] = ()

    @property
    def startup_visible(self) -> bool:
        return not self.silent_at_startup


def label(source: VllmSource) -> str:
    return f"vLLM {source.version() or '(version unknown)'}"
