"""OUT/state.json: what the run is (signature + plan), each step's status, timestamps and outputs, and the manifest
of every file the run wrote in OUT (the archive packs exactly those).

Written atomically after every change, so a run killed at any moment leaves a state a rerun (--resume) can
trust: a step marked done is kept (its outputs are on disk before it is marked), a step marked running was cut
off and is redone, a failed step is redone on --resume (it may have been the machine's fault).

A state file is read through the guarded reader (regular file, no symlink, size cap, UTF-8) and its shape checked
before any of it is used: a damaged or foreign file is refused with a message, never a traceback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from kimi_dflash.bench.report import utc_now
from kimi_dflash.core.atomic_write import write_json_atomic
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.user_files import MiB, UnreadableFile, read_user_json

STATE_FILE = "state.json"
LOCK_FILE = "qualify.lock"  # held by the run using OUT (core.dir_lock); never archived
SCHEMA = "kimi-dflash/qualify-state"
MAX_STATE_BYTES = 4 * MiB  # a real state is a few KiB

DONE, FAILED, SKIPPED, RUNNING = "done", "failed", "skipped", "running"
STATUSES = (DONE, FAILED, SKIPPED, RUNNING)


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
    files: list[str] = field(default_factory=list)  # every file the run wrote, relative to OUT (the manifest)
    server_left: str = ""  # a server this invocation could not stop: what it is and how to stop it

    @property
    def out(self) -> Path:
        return self.path.parent

    def save(self) -> None:
        write_json_atomic(
            self.path,
            {
                "schema": SCHEMA,
                "schema_version": 1,
                "signature": self.signature,
                "plan": self.plan,
                "runs": self.runs,
                "files": self.files,
                "server_left": self.server_left,
                "steps": {name: vars(record) for name, record in self.steps.items()},
            },
        )

    def record(self, *paths: Path) -> None:
        """Add files the run wrote to the manifest (saved with the next change of state)."""
        for path in paths:
            name = path.relative_to(self.out).as_posix()
            if name not in self.files:
                self.files.append(name)

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


def _is_str_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _step_problem(name: str, record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"step {name!r} is not an object"
    if record.get("status") not in STATUSES:
        return f"step {name!r} has status {record.get('status')!r}, not one of {', '.join(STATUSES)}"
    if not (_is_str_or_none(record.get("started_at")) and _is_str_or_none(record.get("finished_at"))):
        return f"step {name!r} has a timestamp that is not text"
    duration = record.get("duration_s")
    if duration is not None and (isinstance(duration, bool) or not isinstance(duration, int | float)):
        return f"step {name!r} has a duration that is not a number"
    if not isinstance(record.get("detail", ""), str) or not isinstance(record.get("outputs", {}), dict):
        return f"step {name!r} has a detail that is not text or outputs that are not an object"
    return None


def _manifest_name_ok(name: Any) -> bool:
    if not isinstance(name, str) or not name or "\x00" in name:
        return False
    parts = PurePosixPath(name).parts
    return not PurePosixPath(name).is_absolute() and ".." not in parts and name not in (STATE_FILE, LOCK_FILE)


def shape_problem(doc: Any) -> str | None:
    """What makes ``doc`` not a state this version wrote (None when it is one)."""
    if not isinstance(doc, dict):
        return f"the document is {type(doc).__name__}, not an object"
    if doc.get("schema") != SCHEMA:
        return f"schema {doc.get('schema')!r}, not {SCHEMA!r}"
    for key in ("signature", "plan", "steps"):
        if not isinstance(doc.get(key), dict):
            return f"{key!r} is missing or not an object"
    runs = doc.get("runs", [])
    if not isinstance(runs, list) or not all(
        isinstance(r, dict) and all(isinstance(v, str) for v in r.values()) for r in runs
    ):
        return "'runs' is not a list of objects of text"
    files = doc.get("files", [])
    if not isinstance(files, list) or not all(_manifest_name_ok(name) for name in files):
        return "'files' is not a list of relative paths inside the directory"
    if not isinstance(doc.get("server_left", ""), str):
        return "'server_left' is not text"
    for name, record in doc["steps"].items():
        problem = _step_problem(name, record)
        if problem:
            return problem
    return None


def read_state(path: Path) -> dict[str, Any]:
    """The recorded state document, its shape checked; ``UserError`` naming what is wrong and the way out."""
    doc = read_user_json(path, what="qualify state file", max_bytes=MAX_STATE_BYTES, follow_symlinks=False)
    problem = shape_problem(doc)
    if problem:
        raise UnreadableFile(f"qualify state file {path}: not a state this version of qualify wrote ({problem})")
    return dict(doc)


def _record(doc: dict[str, Any]) -> StepRecord:
    return StepRecord(
        **{k: doc.get(k) for k in ("status", "started_at", "finished_at", "duration_s")},
        detail=doc.get("detail") or "",
        outputs=dict(doc.get("outputs") or {}),
    )


def open_state(out: Path, signature: dict[str, Any], plan: dict[str, Any], resume: bool) -> RunState:
    """A fresh state, or (with --resume) the recorded one, refused when it qualifies something else or cannot be
    read as a state. The plan is this invocation's (equal signatures plan the same steps)."""
    path = out / STATE_FILE
    recorded = path.exists() or path.is_symlink()
    if not recorded:
        state = RunState(path, signature, plan)
    else:
        if not resume:
            raise UserError(f"{out} already holds a qualify run; pass --resume to finish it, or use another --out.")
        try:
            doc = read_state(path)
        except UserError as exc:
            raise UserError(f"{exc}; use another --out.") from None
        if doc["signature"] != signature:
            changed = sorted(
                k for k in set(doc["signature"]) | set(signature) if doc["signature"].get(k) != signature.get(k)
            )
            raise UserError(
                f"{out} holds a qualify run with different {', '.join(changed)}; resuming would mix "
                "two runs. Rerun with the recorded settings (state.json) or use another --out."
            )
        steps = {name: _record(record) for name, record in doc["steps"].items()}
        state = RunState(path, doc["signature"], plan, steps, list(doc.get("runs", [])), list(doc.get("files", [])))
    state.runs.append({"started_at": utc_now(), "resumed": str(recorded).lower()})
    out.mkdir(parents=True, exist_ok=True)
    state.save()
    return state
