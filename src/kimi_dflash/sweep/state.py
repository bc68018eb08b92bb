"""Each sweep point finished (``<point>.json``), failed (``<point>.failed.json``) or to do (run state: sweep.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import JsonValue, model_validator

from kimi_dflash.bench.result import BenchmarkResult, load_result
from kimi_dflash.config.schema import shown_values
from kimi_dflash.core.errors import UserError
from kimi_dflash.documents import Document, Model
from kimi_dflash.launch.serve_sh import RECORD_FILE as RUNNING_FILE
from kimi_dflash.runs.state import RunState
from kimi_dflash.sweep.grid import Point

SWEEP_FILE = "sweep.json"
LOCK_FILE = "sweep.lock"


class Failure(Document):
    """``<point>.failed.json``."""

    SCHEMA = "kimi-dflash/sweep-failure"
    WHAT = "sweep failure record"
    point: str
    stage: Literal["server", "benchmark"]
    detail: str
    log_tail: list[str]


class SweepSignature(Model):
    config: str
    grid: list[str]
    sessions: list[int]
    benchmark_options: list[str]


class SweepState(RunState):
    SCHEMA = "kimi-dflash/sweep-state"
    WHAT = "sweep state file"
    FILE, LOCK, RUN = SWEEP_FILE, LOCK_FILE, "sweep"
    signature: SweepSignature

    @model_validator(mode="before")
    @classmethod
    def _signature_alone(cls, data: JsonValue) -> JsonValue:
        """sweep.json before it was a state: the signature's fields at the top level."""
        return {"signature": data} if isinstance(data, dict) and "signature" not in data else data


def result_path(out: Path, point: Point) -> Path:
    return out / f"{point.name}.json"


def failure_path(out: Path, point: Point) -> Path:
    return out / f"{point.name}.failed.json"


def server_log(out: Path, point: Point) -> Path:
    return out / "logs" / f"{point.name}.server.log"


def bench_log(out: Path, point: Point) -> Path:
    return out / "logs" / f"{point.name}.bench.log"


def point_files(out: Path, point: Point) -> list[Path]:
    """Every file a point leaves in DIR (those its run wrote: the result or the failure, and both logs)."""
    return [result_path(out, point), failure_path(out, point), server_log(out, point), bench_log(out, point)]


def _complete(path: Path) -> BenchmarkResult | None:
    """The point result at ``path`` if it is complete (an interrupted, foreign or missing file is not)."""
    try:
        result = load_result(path) if path.is_file() else None
    except UserError:
        return None
    return result if result and result.run.status == "complete" and result.server_config is not None else None


def finished_result(out: Path, point: Point) -> BenchmarkResult | None:
    result = _complete(result_path(out, point))
    return result if result and result.server_config.overrides == shown_values(dict(point.overrides)) else None  # type: ignore[union-attr]


def read_failures(out: Path) -> list[Failure]:
    return [f for f in map(Failure.load_or_none, sorted(out.glob("*.failed.json"))) if f is not None]


def finished_results(out: Path) -> list[tuple[Path, BenchmarkResult]]:
    """Every complete point result in DIR, in file-name order."""
    paths = [p for p in sorted(out.glob("*.json")) if p.name not in (SWEEP_FILE, RUNNING_FILE)]
    found = [(path, _complete(path)) for path in paths if not path.name.endswith(".failed.json")]
    return [(path, result) for path, result in found if result is not None]
