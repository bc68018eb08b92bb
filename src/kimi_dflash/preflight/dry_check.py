"""The dry engine as a step of `serve.sh --check-vllm DIR` and of preflight: run it when the vLLM being judged is
the one the serving Python imports (the dry engine can only run that one), say plainly when it is skipped, and
compare its verdict with the static rules (dry_compare)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.preflight.compat import CompatReport
from kimi_dflash.preflight.dry_compare import compare
from kimi_dflash.preflight.dry_engine import dry_engine_for_plan

SKIP_FLAG = "--no-dry-engine"


@dataclass(frozen=True)
class DryStep:
    ok: bool  # False: vLLM's own start-up code refused the plan
    text: str


def skipped(reason: str) -> DryStep:
    return DryStep(True, f"dry engine: skipped ({reason})")


def dry_step(config, plan, static: CompatReport | None, *, python: str, judged: Path | None) -> DryStep:
    """`judged`: the vLLM package directory being judged (None: the serving Python's own)."""
    installed = installed_vllm(python)
    if installed is None:
        return skipped(f"{python} has no vLLM to run")
    if judged is not None and judged.resolve() != installed.resolve():
        return skipped(
            f"it runs the vLLM that {python} imports ({installed}), not the one judged here ({judged}); install "
            "that vLLM into the serving Python to run its start-up code"
        )
    verdict = dry_engine_for_plan(config, plan, python=python)
    lines = [verdict.render()]
    if static is not None:
        lines.append("  " + compare(verdict, static).render().replace("\n", "\n  "))
    return DryStep(not verdict.ran or verdict.starts, "\n".join(lines))


def installed_vllm(python: str) -> Path | None:
    import subprocess
    import sys

    if python == sys.executable:
        from kimi_dflash.preflight.runtime_child import vllm_package_dir

        return vllm_package_dir()
    code = "import importlib.util as u; s = u.find_spec('vllm'); print(s.submodule_search_locations[0] if s else '')"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(out.strip()) if out.strip() else None
