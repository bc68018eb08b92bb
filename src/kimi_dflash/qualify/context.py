"""What every qualify step shares: the run's context, and serving a point (judged while up, benchmarked, stopped)."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.bench.result import BenchmarkResult
from kimi_dflash.config.schema import KEY
from kimi_dflash.documents import Document
from kimi_dflash.qualify import lossless
from kimi_dflash.qualify.lossless import GreedyOutputs, LosslessVerdict
from kimi_dflash.qualify.plan import QualifyPlan
from kimi_dflash.runs.orchestrator import Outcome
from kimi_dflash.runs.state import DONE, FAILED, StepOutputs
from kimi_dflash.sweep import state as points_state
from kimi_dflash.sweep.grid import Point
from kimi_dflash.sweep.points import OnReady, PointPlan, run_point
from kimi_dflash.validate.prompts import load_calibration_prompts

# Config keys that make the candidate serve another model (and so another tokenizer).
MODEL_KEYS = (KEY.MODEL_DIR, KEY.MODEL_REPO, KEY.FABRICATE_DEMO_MODELS)
Results = list[tuple[str, BenchmarkResult]]


@dataclass(frozen=True)
class Context:
    config: Path  # resolved
    config_as_given: str
    values: dict[str, str]  # the config's values as strings (API_KEY left out)
    overrides: dict[str, str]  # config keys this run took from the environment
    plan: QualifyPlan
    out: Path
    serve_command: tuple[str, ...]
    candidate_env: tuple[tuple[str, str], ...] = ()  # test aid: make the candidate differ beyond speculation
    say: Callable[[str], None] = functools.partial(print, file=sys.stderr, flush=True)
    # Lists files in the manifest the archive packs, before they are written: a failing step's server log is packed too.
    record: Callable[..., None] = lambda *paths: None
    reference_out: Path | None = None  # a shoot-out candidate's: the run's OUT, which holds the reference's files
    same_target: bool = True  # serves the reference's model (its tokenizer decodes both sides of a divergence)

    def candidate(self, name: str) -> Context:
        """A shoot-out candidate's context: its config and plan, its files in OUT/candidates/<name>/."""
        c = next(c for c in self.plan.candidates if c.name == name)
        return dataclasses.replace(
            self,
            config=Path(c.path),
            config_as_given=c.config,
            plan=c.plan,
            out=self.out / "candidates" / name,
            reference_out=self.out,
            same_target=c.same_target,
        )

    @property
    def grid_dir(self) -> Path:
        return self.out / "grid"

    @property
    def lossless_dir(self) -> Path:
        return self.out / "lossless"

    def write(self, path: Path, document: Document) -> None:
        self.record(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        document.save(path)

    def files(self, *paths: Path) -> StepOutputs:
        return StepOutputs(files=[path.relative_to(self.out).as_posix() for path in paths])

    def point(self, k: int) -> Point:
        extra = self.candidate_env if k == self.plan.spec_tokens else ()
        return Point(((KEY.NUM_SPECULATIVE_TOKENS, str(k)), *extra))

    def points(
        self,
        points: list[Point] | None = None,
        out: Path | None = None,
        sessions: tuple[int, ...] | None = None,
        bench_args: Sequence[str] | None = None,
    ) -> PointPlan:
        """The grid's points in grid/ (or ``points`` in ``out``), each file they write listed in the manifest."""
        plan = PointPlan(
            config=self.config,
            serve_command=self.serve_command,
            sessions=sessions or self.plan.sessions,
            points=points or [self.point(k) for k in self.plan.k_values if k or not self.reference_out],
            out=out or self.grid_dir,
            bench_args=list(bench_args or self.plan.bench_args),
            config_as_given=self.config_as_given,
            server_env=self.plan.server_env,
        )
        plan.out.mkdir(parents=True, exist_ok=True)
        self.record(*(path for point in plan.points for path in points_state.point_files(plan.out, point)))
        return plan


def serve(ctx: Context, plan: PointPlan, point: Point, on_ready: OnReady | None) -> list[str]:
    """Serve a point (again only when ``on_ready`` needs it); the problems, ``on_ready``'s included (empty: done)."""
    plan.servers.stop_leftover(lambda text: ctx.say(f"qualify: {text}"))
    if on_ready is None and points_state.finished_result(plan.out, point) is not None:
        return []
    errors: list[str] = []  # what on_ready raised: the step's failure, and the point still runs
    guarded = on_ready and tolerant(on_ready, errors.append)
    outcome = run_point(plan, point, lambda text: ctx.say(f"qualify: {point.label}: {text}"), guarded)
    return errors + ([outcome.detail] if outcome.status == FAILED else [])


def shipped_outputs(ctx: Context, path: Path, url: str) -> None:
    """The server's greedy outputs for the shipped prompts, saved once (a rerun keeps them)."""
    if not path.is_file():
        prompts = load_calibration_prompts()[: max(1, ctx.plan.box.lossless_prompts)]
        ctx.write(path, lossless.generate(url, prompts, ctx.plan.box.lossless_max_tokens))


def against_reference(ctx: Context, own: Path, verdict: Path, same_tokenizer: bool, what: str) -> OnReady:
    """A hook: this server's outputs compared token by token with the stored reference's -> ``verdict``."""

    def compare(url: str) -> None:
        shipped_outputs(ctx, own, url)
        reference = (ctx.reference_out or ctx.out) / "lossless" / "reference.json"
        if not reference.is_file():
            raise FileNotFoundError(f"no reference outputs (the reference step failed): {what} not judged")
        judged = lossless.compare(GreedyOutputs.load(reference), GreedyOutputs.load(own), url, same_tokenizer)
        ctx.write(verdict, judged)

    return compare


def point_outcome(ctx: Context, plan: PointPlan, point: Point, errors: list[str], *files: Path) -> Outcome:
    outputs = ctx.files(*files, points_state.result_path(plan.out, point))
    if errors:
        return Outcome(FAILED, "; ".join(errors), outputs)
    return Outcome(DONE, f"{point.label}: outputs and benchmark done", outputs)


def chained(*hooks: OnReady | None) -> OnReady | None:
    """The hooks given, run in order on one server (None: there are none)."""
    present = [hook for hook in hooks if hook is not None]

    def run(url: str) -> None:
        for hook in present:
            hook(url)

    return run if present else None


def tolerant(hook: OnReady, say: Callable[[str], None]) -> OnReady:
    """``hook``, whose failure is only said: the server it runs on still serves its benchmark."""

    def run(url: str) -> None:
        try:
            hook(url)
        except Exception as exc:  # noqa: BLE001 - whoever reads the hook's files finds none, and says so
            say(f"{type(exc).__name__}: {exc}")

    return run


def judged(ctx: Context, what: str) -> OnReady | None:
    """A hook judging a server beside the candidate against the reference (lossless/verdict-<what>.json; None: done)."""
    verdict = ctx.lossless_dir / f"verdict-{what}.json"
    own = ctx.lossless_dir / f"{what}.json"
    return None if verdict.is_file() else against_reference(ctx, own, verdict, ctx.same_target, what)


def verdict_of(ctx: Context, what: str | None) -> LosslessVerdict | None:
    """The candidate's verdict (``what`` None), or that of a server judged with ``judged``."""
    return LosslessVerdict.load_or_none(ctx.lossless_dir / (f"verdict-{what}.json" if what else "verdict.json"))


def grid_results(ctx: Context) -> Results:
    """The grid's results; a shoot-out candidate's with the reference's (k=0) first."""
    grids = ([ctx.reference_out / "grid"] if ctx.reference_out else []) + [ctx.grid_dir]
    return [(path.stem, result) for grid in grids for path, result in points_state.finished_results(grid)]


def written(ctx: Context, name: str, document: Document, rows: int, detail: str) -> Outcome:
    ctx.write(ctx.out / name, document)
    return Outcome(DONE, detail, ctx.files(ctx.out / name).model_copy(update={"rows": rows}))
