"""What a sweep's output directory says about each point: finished, failed, or still to do.

Layout of DIR:
  <point>.json          the point's benchmark result (with its server config); written atomically, so a point
                        is finished exactly when this file exists and loads as a complete result
  <point>.failed.json   why the point failed (server did not start, benchmark failed) and the log tail
  sweep.json            what the sweep measures (config, grid, levels, benchmark options): a rerun must match it
  running.json          the server a point has up right now (so a rerun after a hard kill, or after a refused
                        serve.sh --stop, can stop it); removed once its stop succeeded
  sweep.lock            held by the sweep using DIR (core.dir_lock): one run per directory
  logs/                 server and benchmark logs per point
  summary.md, *.png     the aggregate table and plots, rebuilt at the end of every run
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_dflash.bench.report import write_atomic
from kimi_dflash.bench.result import BenchmarkResult, load_result
from kimi_dflash.core.errors import UserError
from kimi_dflash.sweep.grid import Point

SWEEP_FILE = "sweep.json"
RUNNING_FILE = "running.json"
LOCK_FILE = "sweep.lock"
FAILURE_SCHEMA = "kimi-dflash/sweep-failure"


@dataclass(frozen=True)
class Failure:
    point: str
    stage: str  # "server" or "benchmark"
    detail: str
    log_tail: list[str]


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


def finished_result(out: Path, point: Point) -> BenchmarkResult | None:
    """The point's result if it is complete (an interrupted or foreign file counts as not finished)."""
    path = result_path(out, point)
    if not path.is_file():
        return None
    try:
        result = load_result(path)
    except UserError:
        return None
    config = result.server_config
    if result.run.status != "complete" or config is None or config.overrides != dict(point.overrides):
        return None
    return result


def check_signature(out: Path, signature: dict[str, Any]) -> None:
    """Record what this sweep measures, or refuse a rerun that measures something else into the same DIR."""
    path = out / SWEEP_FILE
    if path.is_file():
        recorded = json.loads(path.read_text(encoding="utf-8"))
        if recorded != signature:
            changed = sorted(k for k in set(recorded) | set(signature) if recorded.get(k) != signature.get(k))
            raise UserError(
                f"{out} holds a sweep with different {', '.join(changed)}; resuming it would mix workloads. "
                "Use another --out, or rerun with the recorded settings (see sweep.json there)."
            )
        return
    write_atomic(path, signature)


def write_failure(out: Path, failure: Failure) -> None:
    write_atomic(
        out / f"{failure.point}.failed.json",
        {"schema": FAILURE_SCHEMA, "point": failure.point, "stage": failure.stage, "detail": failure.detail,
         "log_tail": failure.log_tail},
    )  # fmt: skip


def read_failures(out: Path) -> list[Failure]:
    failures = []
    for path in sorted(out.glob("*.failed.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            failures.append(Failure(doc["point"], doc["stage"], doc["detail"], list(doc["log_tail"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return failures


def finished_results(out: Path) -> list[tuple[Path, BenchmarkResult]]:
    """Every complete point result in DIR, in file-name order."""
    found = []
    for path in sorted(out.glob("*.json")):
        if path.name in (SWEEP_FILE, RUNNING_FILE) or path.name.endswith(".failed.json"):
            continue
        try:
            result = load_result(path)
        except UserError:
            continue
        if result.run.status == "complete" and result.server_config is not None:
            found.append((path, result))
    return found
