"""Run a list of units (sweep points, qualify steps) against a state file: finished units are kept, a unit that raises
is recorded as failed and the run goes on. SIGTERM becomes ``Interrupted``: the unit cut off stays ``running``."""

from __future__ import annotations

import errno
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

from kimi_dflash.core.formatting import duration as format_duration
from kimi_dflash.launch.serve_sh import ServerLeftRunning
from kimi_dflash.runs.state import FAILED, KEPT, SKIPPED, RunState, S, Status, StepOutputs

Say = Callable[[str], None]
WRITE_FIXES = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space (the disk quota is full)",
    errno.EROFS: "name an --out on a writable filesystem",
    errno.EACCES: "make it writable, or name another --out",
    errno.EPERM: "make it writable, or name another --out",
}


class Interrupted(BaseException):
    """SIGTERM: stop the unit's server and leave the unit unfinished (not an error of the unit: BaseException)."""


@dataclass(frozen=True)
class Outcome:
    status: Status  # DONE, FAILED or SKIPPED
    detail: str = ""
    outputs: StepOutputs = field(default_factory=StepOutputs)


@dataclass(frozen=True)
class Unit:
    name: str
    work: Callable[[Say], Outcome]  # gets a ``say`` that prints on the unit's progress line
    estimate_s: float | None = None  # None: the ETA is the mean time of the units run so far
    runs: bool = True  # False: recorded as skipped, with the reason
    reason: str = ""
    finished: Callable[[], bool] | None = None  # its own files say it is done (a sweep point's result), not the state
    label: str = ""


@dataclass
class Tally:
    kept: int = 0
    ran: int = 0
    failed: int = 0
    stopped_at: str = ""  # a unit whose failure stopped the run


class Progress:
    """Unit i/n, elapsed, and an ETA: the remaining units' weight (their estimates, or 1 each) times the time this
    run has taken per unit of weight so far (the estimates themselves before anything finished)."""

    def __init__(self, what: str, units: Sequence[Unit], out: TextIO) -> None:
        self.what, self.units, self.out = what, units, out
        self.started = time.monotonic()
        self.spent = self.weight_done = 0.0

    @staticmethod
    def weight(unit: Unit) -> float:
        return 1.0 if unit.estimate_s is None else unit.estimate_s

    def eta(self, index: int) -> str:
        remaining = sum(self.weight(u) for u in self.units[index:] if u.runs)
        if self.weight_done > 0 and self.spent > 0:
            return format_duration(remaining * self.spent / self.weight_done)
        if any(u.estimate_s is None for u in self.units):
            return "after the first"
        return format_duration(remaining)

    def say(self, index: int, unit: Unit, text: str) -> None:
        elapsed = format_duration(time.monotonic() - self.started)
        where = f"{self.what} [{index + 1}/{len(self.units)}] {unit.label or unit.name}"
        print(f"{where}: {text} (elapsed {elapsed}, ETA {self.eta(index)})", file=self.out, flush=True)

    def done(self, unit: Unit, seconds: float) -> None:
        self.spent += seconds
        self.weight_done += self.weight(unit)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    def on_term(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _outcome(unit: Unit, say: Say) -> Outcome:
    if not unit.runs:
        return Outcome(SKIPPED, unit.reason)
    try:
        return unit.work(say)
    except ServerLeftRunning:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded; the run goes on with the next unit
        return Outcome(FAILED, f"{type(exc).__name__}: {exc}")


def run_units(
    units: Sequence[Unit],
    state: RunState | None,
    what: str,
    noun: str = "steps",
    *,
    stops_the_run: Sequence[str] = (),
    out: TextIO = sys.stderr,
) -> Tally:
    """Every unit not finished yet, recorded in ``state`` (None: a nested run whose units' own files say what is
    finished). A failure of a unit named in ``stops_the_run`` ends the run there (``Tally.stopped_at``)."""
    progress, tally = Progress(what, units, out), Tally()
    kept = [
        u.name for u in units if (u.finished() if u.finished else state is not None and state.status(u.name) in KEPT)
    ]
    if kept and len(units) > 1:
        print(f"{what}: {len(kept)} of {len(units)} {noun} already finished; kept", file=out, flush=True)
    with sigterm_interrupts():
        for index, unit in enumerate(units):
            if unit.name in kept:
                progress.say(index, unit, f"{(state and state.status(unit.name)) or 'done'} in an earlier run; kept")
                tally.kept += 1
                continue
            if unit.runs:
                progress.say(index, unit, "running")
            began = state.begin(unit.name) if state is not None else time.monotonic()
            try:
                outcome = _outcome(unit, lambda text, i=index, u=unit: progress.say(i, u, text))
            except ServerLeftRunning as exc:
                if state is not None:
                    state.server_left = str(exc)
                    state.finish(unit.name, FAILED, began, str(exc))
                raise
            if state is not None:
                state.finish(unit.name, outcome.status, began, outcome.detail, outcome.outputs)
            progress.done(unit, time.monotonic() - began)
            progress.say(index, unit, f"{outcome.status}: {outcome.detail}"[:400])
            tally.ran += unit.runs
            tally.failed += outcome.status == FAILED
            if outcome.status == FAILED and unit.name in stops_the_run:
                tally.stopped_at = unit.name
                break
    return tally


def run_in_directory(fresh: S, body: Callable[[S], int], what: str, rerun: str, *, resume: bool = True) -> int:
    """``body`` on the state opened in its locked directory, with the ends sweep and qualify share: an interrupt
    (130 SIGINT, 143 SIGTERM), one that cannot be written (read-only, the disk full: exit 1; the state on disk is the
    last one written whole, so ``rerun`` keeps what finished). A directory refused or in use is a ``UserError``
    (options.run prints it)."""
    try:
        with fresh.opened(resume) as state:
            return body(state)
    except (KeyboardInterrupt, Interrupted) as exc:
        print(f"\n{what}: interrupted ({str(exc) or 'SIGINT'}); {rerun} to finish", file=sys.stderr)
        return 143 if isinstance(exc, Interrupted) else 130
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        fix = WRITE_FIXES.get(exc.errno or 0, "check the directory")
        fix = f"{fix[0].upper() + fix[1:]}, then {rerun} (finished work is kept)."
        print(f"{what}: cannot write in --out {fresh.out}{where}: {exc.strerror or exc}. {fix}", file=sys.stderr)
        return 1
