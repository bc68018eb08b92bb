"""Run the plan's steps in order against the state file: finished steps are kept, a failed step is recorded and
the run goes on where it can (a failed preflight stops it: the plan would not run right), progress with an ETA
on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from kimi_dflash.bench.progress import format_duration
from kimi_dflash.qualify.plan import Step
from kimi_dflash.qualify.state import DONE, FAILED, SKIPPED, RunState
from kimi_dflash.qualify.steps import STEPS, Context, Outcome
from kimi_dflash.sweep.runner import ServerLeftRunning

KEPT = (DONE, SKIPPED)  # a rerun keeps these; failed or cut-off (running) steps are redone
STOPS_THE_RUN = ("preflight",)


class Progress:
    """Step i/n, elapsed, and an ETA: the remaining estimates scaled by how this run's steps compared with theirs."""

    def __init__(self, steps: list[Step], out: TextIO) -> None:
        self.steps, self.out = steps, out
        self.started = time.monotonic()
        self.spent = 0.0
        self.estimated = 0.0

    def eta(self, index: int) -> str:
        remaining = sum(s.estimate_s for s in self.steps[index:] if s.runs)
        scale = self.spent / self.estimated if self.estimated > 0 and self.spent > 0 else 1.0
        return format_duration(remaining * scale)

    def say(self, index: int, step: Step, text: str) -> None:
        elapsed = format_duration(time.monotonic() - self.started)
        print(
            f"qualify [{index + 1}/{len(self.steps)}] {step.name}: {text} (elapsed {elapsed}, ETA {self.eta(index)})",
            file=self.out,
            flush=True,
        )

    def done(self, step: Step, seconds: float) -> None:
        self.spent += seconds
        self.estimated += step.estimate_s


def _run_one(ctx: Context, step: Step) -> Outcome:
    if not step.runs:
        return Outcome(SKIPPED, step.reason)
    try:
        return STEPS[step.name](ctx)
    except (KeyboardInterrupt, SystemExit, ServerLeftRunning):
        raise
    except Exception as exc:  # noqa: BLE001 - recorded; the run goes on with the next step
        return Outcome(FAILED, f"{type(exc).__name__}: {exc}")


def run_steps(ctx: Context, state: RunState, out: TextIO = sys.stderr) -> bool:
    """Every step but the report. False when the run stopped early (preflight failed); ServerLeftRunning (the step
    recorded as failed) when a server could not be stopped: nothing more may start beside it."""
    steps = [s for s in ctx.plan.steps if s.name in STEPS]
    progress = Progress(steps, out)
    for index, step in enumerate(steps):
        if state.status(step.name) in KEPT:
            progress.say(index, step, f"{state.status(step.name)} in an earlier run; kept")
            continue
        if step.runs:
            progress.say(index, step, "running")
        began = state.begin(step.name)
        try:
            outcome = _run_one(ctx, step)
        except ServerLeftRunning as exc:
            state.finish(step.name, FAILED, began, str(exc))
            raise
        state.finish(step.name, outcome.status, began, outcome.detail, outcome.outputs)
        progress.done(step, time.monotonic() - began)
        progress.say(index, step, f"{outcome.status}: {outcome.detail}"[:400])
        if outcome.status == FAILED and step.name in STOPS_THE_RUN:
            print(
                f"qualify: {step.name} failed; stopping here (the plan would not run right). Fix what it names "
                "and rerun with --resume.",
                file=out,
            )
            return False
    return True
