"""Will this vLLM start this plan? Every rule of compat_rules over one deployment and one vLLM source, with a
verdict: exit 0 (starts; naming every patch or plugin hook it relies on) or 2 (would not start; every reason
with its fix). Nothing is started and nothing is imported: vLLM is read as source.

    report = check_compat(deployment, VllmSource.open("/path/to/vllm"))
    print(report.render()); sys.exit(report.exit_code)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kimi_dflash.patcher.vllm_source import VllmSource
from kimi_dflash.preflight.compat_rules import CompatRule, Finding
from kimi_dflash.preflight.deployment import Deployment
from kimi_dflash.preflight.render import render
from kimi_dflash.preflight.runtime_rules import ALL_RULES

EXIT_STARTS, EXIT_WOULD_NOT_START = 0, 2


@dataclass(frozen=True)
class CompatReport:
    deployment: Deployment
    vllm_origin: str
    vllm_version: str | None
    findings: tuple[Finding, ...]

    @property
    def starts(self) -> bool:
        return not any(f.status == "fail" for f in self.findings)

    @property
    def exit_code(self) -> int:
        return EXIT_STARTS if self.starts else EXIT_WOULD_NOT_START

    @property
    def relies(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r for f in self.findings for r in f.relies))

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status == "fail")

    def verdict(self) -> str:
        version = self.vllm_version or "(version unknown)"
        if not self.starts:
            reasons = ", ".join(dict.fromkeys(f.name for f in self.failures))
            return (
                f"verdict: vLLM {version} would NOT start {self.deployment.label} ({len(self.failures)} "
                f"reason(s), each [FAIL] above with its fix: {reasons})"
            )
        relying = f", relying on {', '.join(self.relies)}" if self.relies else ""
        return f"verdict: vLLM {version} starts {self.deployment.label}{relying}"

    def render(self) -> str:
        lines = [
            f"vLLM compatibility of {self.deployment.label} ({self.deployment.platform}) with vLLM "
            f"{self.vllm_version or '(version unknown)'} at {self.vllm_origin}: read from source, nothing "
            "started"
        ]
        for facts in (self.deployment.target, self.deployment.drafter):
            if facts is not None:
                lines.append(f"{facts.role} checkpoint: {facts.describe()} - from {facts.where()}")
        if self.deployment.target is None:
            lines.append(
                "target checkpoint: unknown (no config.json at MODEL_DIR and no shipped facts for "
                "MODEL_REPO); checks that need it are skipped"
            )
        lines.append(render(self.findings, summary=False))
        lines.append(self.verdict())
        return "\n".join(lines)


def check_compat(deployment: Deployment, source: VllmSource, rules: Sequence[CompatRule] = ALL_RULES) -> CompatReport:
    findings: list[Finding] = []
    for rule in rules:
        findings.extend(rule.check(deployment, source))
    return CompatReport(deployment, source.origin, source.version(), tuple(findings))
