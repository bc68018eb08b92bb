"""OUT/state.json: what the run is (signature + plan) and each step's status, timestamps and outputs.

Written atomically after every change, so a run killed at any moment leaves a state a rerun (--resume) can
trust: a step marked done is kept (its outputs are on disk before it is marked), a step marked running was cut
off and is redone, a failed step is redone on --resume (it may have been the machine's fault).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_dflash.bench.report import utc_now
from kimi_dflash.core.atomic_write import write_json_atomic
from kimi_dflash.core.errors import UserError

STATE_FILE = "state.json"
SCHEMA = "kimi-dflash/qualify-state"

DONE, FAILED, SKIPPED, RUNNING = "done", "failed", "skipped", "running"


@dataclass
class StepRecord:
    status: str
    started_at: str | None = None
    finished_at: str | None = None
    duration_s: float | None = None
    detail: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunState:
    path: Path
    signature: dict[str, Any]
    plan: dict[str, Any]
    steps: dict[str, StepRecord] = field(default_factory=dict)
    runs: list[dict[str, str]] = field(default_factory=list)  # one entry per invocation (started_at, resumed)

    def save(self) -> None:
        write_json_atomic(
            self.path,
            {
                "schema": SCHEMA,
                "schema_version": 1,
                "signature": self.signature,
                "plan": self.plan,
                "runs": self.runs,
                "steps": {name: vars(record) for name, record in self.steps.items()},
            },
        )

    def status(self, name: str) -> str | None:
        record = self.steps.get(name)
        return record.status if record else None

    def outputs(self, name: str) -> dict[str, Any]:
        record = self.steps.get(name)
        return record.outputs if record else {}

    def begin(self, name: str) -> float:
        self.steps[name] = StepRecord(RUNNING, started_at=utc_now())
        self.save()
        return time.monotonic()

    def finish(
        self, name: str, status: str, began: float, detail: str = "", outputs: dict[str, Any] | None = None
    ) -> None:
        record = self.steps.get(name) or StepRecord(status)
        record.status, record.detail = status, detail
        record.finished_at, record.duration_s = utc_now(), round(time.monotonic() - began, 3)
        record.outputs = outputs or {}
        self.steps[name] = record
        self.save()


def _record(doc: dict[str, Any]) -> StepRecord:
    return StepRecord(
        **{k: doc.get(k) for k in ("status", "started_at", "finished_at", "duration_s")},
        detail=doc.get("detail") or "",
        outputs=dict(doc.get("outputs") or {}),
    )


def open_state(out: Path, signature: dict[str, Any], plan: dict[str, Any], resume: bool) -> RunState:
    """A fresh state, or (with --resume) the recorded one, refused when it qualifies something else."""
    path = out / STATE_FILE
    if not path.is_file():
        state = RunState(path, signature, plan)
    else:
        if not resume:
            raise UserError(f"{out} already holds a qualify run; pass --resume to finish it, or use another --out.")
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if doc.get("schema") != SCHEMA:
                raise ValueError(f"schema {doc.get('schema')!r}")
            steps = {name: _record(record) for name, record in doc["steps"].items()}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{path}: not a qualify state file ({exc}); use another --out.") from None
        if doc["signature"] != signature:
            changed = sorted(
                k for k in set(doc["signature"]) | set(signature) if doc["signature"].get(k) != signature.get(k)
            )
            raise UserError(
                f"{out} holds a qualify run with different {', '.join(changed)}; resuming would mix "
                "two runs. Rerun with the recorded settings (state.json) or use another --out."
            )
        state = RunState(path, doc["signature"], doc["plan"], steps, list(doc.get("runs") or []))
    state.runs.append({"started_at": utc_now(), "resumed": str(path.is_file()).lower()})
    out.mkdir(parents=True, exist_ok=True)
    state.save()
    return state
