"""Every rule of rules/catalog/ over one deployment and one vLLM source (read, never imported): exit 0 (starts, naming
what it relies on) or 2 (would not start, or would run wrong). A start judges once (launch/prepare.py) and hands the
verdict to preflight and the patch step."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Sequence
from dataclasses import dataclass

from kimi_dflash.core.checks import CheckResult, Remedy, render
from kimi_dflash.rules import catalog
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Rule
from kimi_dflash.rules.source import VllmSource

EXIT_STARTS, EXIT_WOULD_NOT_START = 0, 2


@functools.cache
def all_rules() -> tuple[Rule, ...]:
    """Start-up rules first, then the runtime traps, each group in module then declaration order."""
    found: list[Rule] = []
    for module in sorted(m.name for m in pkgutil.iter_modules(catalog.__path__)):
        found.extend(importlib.import_module(f"{catalog.__name__}.{module}").RULES)
    ids = [rule.id for rule in found]
    if len(set(ids)) != len(ids):
        raise ValueError(f"rule ids must be unique: {sorted({i for i in ids if ids.count(i) > 1})}")
    return tuple(sorted(found, key=lambda rule: not rule.startup_visible))


def rule(rule_id: str) -> Rule:
    return next(r for r in all_rules() if r.id == rule_id)


@dataclass(frozen=True)
class Verdict:
    deployment: Deployment
    vllm_origin: str
    vllm_version: str | None
    findings: tuple[CheckResult, ...]

    @property
    def starts(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return EXIT_STARTS if self.starts else EXIT_WOULD_NOT_START

    @property
    def relies(self) -> tuple[Remedy, ...]:
        """What the passes rely on; the launcher applies those of its kinds (launch/prepare.py)."""
        return tuple(dict.fromkeys(r for f in self.findings for r in f.relies))

    def remedies(self, *kinds: str) -> tuple[Remedy, ...]:
        return tuple(r for r in self.relies if r.kind in kinds)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(f for f in self.findings if f.status == "fail")

    @property
    def runtime_traps(self) -> tuple[CheckResult, ...]:
        """Failures vLLM's start-up cannot see: it starts the plan, which then runs wrong or slow."""
        silent = {r.id for r in all_rules() if not r.startup_visible}
        return tuple(f for f in self.failures if f.name in silent)

    def verdict(self) -> str:
        version = self.vllm_version or "(version unknown)"
        if not self.starts:
            reasons = ", ".join(dict.fromkeys(f.name for f in self.failures))
            return (
                f"verdict: vLLM {version} would NOT start {self.deployment.label} ({len(self.failures)} "
                f"reason(s), each [FAIL] above with its fix: {reasons})"
            )
        relying = f", relying on {', '.join(map(str, self.relies))}" if self.relies else ""
        return f"verdict: vLLM {version} starts {self.deployment.label}{relying}"

    def render(self) -> str:
        deployment = self.deployment
        lines = [
            f"vLLM compatibility of {deployment.label} ({deployment.platform}) with vLLM "
            f"{self.vllm_version or '(version unknown)'} at {self.vllm_origin}: read from source, nothing started"
        ]
        checkpoints = (deployment.target, deployment.drafter)
        lines += [f"{f.role} checkpoint: {f.describe()} - from {f.where()}" for f in checkpoints if f]
        if deployment.target is None:
            lines.append(
                "target checkpoint: unknown (no config.json at MODEL_DIR and no shipped facts for MODEL_REPO); "
                "checks that need it are skipped"
            )
        return "\n".join([*lines, render(self.findings, summary=False), self.verdict()])


def judge(deployment: Deployment, source: VllmSource, rules: Sequence[Rule] | None = None) -> Verdict:
    findings = []
    for each in all_rules() if rules is None else rules:
        found = each.check(deployment, source)
        for finding in [found] if isinstance(found, CheckResult) else found:
            findings.append(dataclasses.replace(finding, name=each.id))
    return Verdict(deployment, source.origin, source.version(), tuple(findings))
