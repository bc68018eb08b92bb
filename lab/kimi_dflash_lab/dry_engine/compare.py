"""The dry engine's verdict against the static rules' verdict, with the runtime traps accounted for explicitly.

The static rules (kimi_dflash.rules over vLLM's source) say whether vLLM starts a plan; the dry engine runs vLLM's
start-up code and says the same thing from the other side. They must agree. A runtime-trap rule judges plans that
start and then run wrong or slow, and declares why start-up cannot see it (`Rule.silent_at_startup`), so where one of
them fails, the dry engine is expected to say "starts" (which confirms that the trap is silent), not to fail.
"""

from __future__ import annotations

from dataclasses import dataclass

from kimi_dflash.rules.engine import Verdict, rule
from kimi_dflash_lab.dry_engine.engine import DryVerdict


@dataclass(frozen=True)
class Agreement:
    compared: bool  # False when the dry engine did not run (nothing to compare)
    agrees: bool
    static_starts: bool  # the start-up rules' verdict (runtime traps set aside)
    lines: tuple[str, ...]

    def render(self) -> str:
        return "\n".join(self.lines)


def compare(dry: DryVerdict, static: Verdict) -> Agreement:
    runtime = static.runtime_traps
    startup = [f for f in static.failures if f not in runtime]
    static_starts = not startup
    said = "starts" if static_starts else f"would not start ({', '.join(dict.fromkeys(f.name for f in startup))})"
    lines = [f"static start-up rules: {said}"]
    for finding in runtime:
        lines.append(
            f"runtime trap [{finding.name}] (start-up visible: no - {rule(finding.name).silent_at_startup}): the dry "
            "engine is expected to say vLLM starts"
        )
    if not dry.ran:
        lines.append(f"dry engine: not run ({dry.report.get('error')}); nothing compared")
        return Agreement(False, True, static_starts, tuple(lines))
    agrees = dry.starts == static_starts
    dry_said = "vLLM starts this plan" if dry.starts else f"vLLM's error: {dry.report.get('error')}"
    lines.append(f"dry engine: {dry_said}")
    lines.append("agreement: yes" if agrees else "agreement: NO - the static rules and vLLM's own code disagree")
    return Agreement(True, agrees, static_starts, tuple(lines))
