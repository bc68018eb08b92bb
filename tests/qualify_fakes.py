"""Fake qualify steps, for tests of what happens around the steps (the output directory, its lock, the state
file, the archive, stopping servers) without a preflight or a real server (a fixtures module: test files import
it, never each other).

Each fake writes ``fake-<step>.json`` through the context (so it is in the run's manifest); the fake candidate
also writes a passing lossless verdict, so a run of fakes exits 0. Run as a script it is qualify with every step
but those named faked: ``python qualify_fakes.py grid CONFIG --out DIR ...``; with QUALIFY_FAKE_SIGTERM_IN=STEP the
fake of that step sends the run SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from kimi_dflash.documents import Document
from kimi_dflash.qualify import steps
from kimi_dflash.qualify.lossless import LosslessVerdict
from kimi_dflash.qualify.plan import QualifyPlan
from kimi_dflash.qualify.state import QualifySignature, QualifyState
from kimi_dflash.runs.state import DONE
from kimi_dflash.validate.engine import AgreementSummary

PASSING_VERDICT = LosslessVerdict(
    verdict="PASS", reasons=[], reference_model="ref", candidate_model="cand", max_tokens=48, pairs=[],
    agreement=AgreementSummary(prompts=8, identical=8, mean_prefix_agreement=1.0, median_first_divergence=None,
                               earliest_divergence=None),
    first_divergence=None,
)  # fmt: skip


class FakeOutput(Document):
    SCHEMA = "test/fake-step-output"
    step: str


def open_state(out: Path, signature: QualifySignature, plan: QualifyPlan, resume: bool) -> QualifyState:
    """A fresh state, or (``resume``) the recorded one, as qualify opens it."""
    return QualifyState(signature=signature, plan=plan).at(out).open(resume)


def fake_output(out: Path, step: str) -> Path:
    return out / f"fake-{step}.json"


def _fake(name: str) -> Callable[[steps.Context], steps.Outcome]:
    def step(ctx: steps.Context) -> steps.Outcome:
        if os.environ.get("QUALIFY_FAKE_SIGTERM_IN") == name:  # the run is terminated in the middle of this step
            os.kill(os.getpid(), signal.SIGTERM)
        ctx.write(fake_output(ctx.out, name), FakeOutput(step=name))
        if name == "candidate":
            ctx.write(ctx.lossless_dir / "verdict.json", PASSING_VERDICT)
        return steps.Outcome(DONE, f"fake {name}")

    return step


def fakes(keep: Iterable[str] = ()) -> dict[str, Callable[[steps.Context], steps.Outcome]]:
    """A fake for every step but ``keep``."""
    return {name: _fake(name) for name in steps.STEPS if name not in set(keep)}


if __name__ == "__main__":
    from kimi_dflash.core import options

    steps.STEPS.update(fakes(sys.argv[1].split(",")))
    sys.exit(options.run("kimi_dflash.qualify.cli", sys.argv[2:]))
