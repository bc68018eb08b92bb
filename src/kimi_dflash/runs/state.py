"""A resumable run's state file, written atomically after every change so a rerun can trust it: a unit marked done
is kept (its outputs are on disk before it is marked), one marked running or failed is redone. Each user (sweep,
qualify) subclasses ``RunState`` with its schema, file names and typed signature."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Annotated, ClassVar, Literal, TypeVar

from pydantic import AfterValidator, JsonValue, PrivateAttr, field_validator, model_validator

from kimi_dflash.core.atomic_write import owner_name, refuse_foreign_link
from kimi_dflash.core.dir_lock import directory_lock
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.formatting import utc_now
from kimi_dflash.core.user_files import MiB
from kimi_dflash.documents import Document, Model

DONE, FAILED, SKIPPED, RUNNING = "done", "failed", "skipped", "running"
Status = Literal["done", "failed", "skipped", "running"]
KEPT = (DONE, SKIPPED)  # a rerun keeps these; failed or cut-off (running) units are redone
S = TypeVar("S", bound="RunState")


class StepOutputs(Model):
    """What a unit left (paths relative to the run's directory) and its headline figures."""

    files: list[str] = []
    verdict: str | None = None
    rows: int | None = None
    failing: list[str] = []
    exit_code: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_file(cls, data: JsonValue) -> JsonValue:
        """Version 1 states written before the outputs were typed name a step's document as "file"."""
        if isinstance(data, dict) and isinstance(data.get("file"), str):
            return {**data, "files": [data["file"]]}
        return data


class StepRecord(Model):
    status: Status
    started_at: str | None = None
    finished_at: str | None = None
    duration_s: float | None = None
    detail: str = ""
    outputs: StepOutputs = StepOutputs()


class Invocation(Model):
    started_at: str
    resumed: Literal["true", "false"]


def _inside(name: str) -> str:
    parts = PurePosixPath(name).parts
    if not name or "\x00" in name or PurePosixPath(name).is_absolute() or ".." in parts:
        raise ValueError("not a relative path inside the directory")
    return name


class RunState(Document):
    FILE: ClassVar[str]  # the state file, in the run's directory
    LOCK: ClassVar[str]  # held by the run using the directory (core.dir_lock); never archived
    RUN: ClassVar[str]  # the kind of run, in messages
    MAX_BYTES = 4 * MiB  # a real state is a few KiB
    MODE = 0o600  # in a directory of this user's alone (opened): nothing of a run is for other users

    signature: Model  # what the run measures: a rerun must match it (each user narrows the type)
    runs: list[Invocation] = []
    files: list[Annotated[str, AfterValidator(_inside)]] = []
    server_left: str = ""  # a server this invocation could not stop: what it is and how to stop it
    steps: dict[str, StepRecord] = {}
    _out: Path = PrivateAttr(default=Path("."))

    @field_validator("files")
    @classmethod
    def _not_the_run_s_own(cls, names: list[str]) -> list[str]:
        if {cls.FILE, cls.LOCK} & set(names):
            raise ValueError(f"lists {cls.FILE} or {cls.LOCK}, which a run never records as written")
        return names

    @property
    def out(self) -> Path:
        return self._out

    def save(self, path: Path | None = None) -> None:
        super().save(path or self._out / self.FILE)

    def record(self, *paths: Path) -> None:
        """Add files the run writes to the manifest (saved with the next change of state)."""
        for path in paths:
            name = path.relative_to(self._out).as_posix()
            if name not in self.files and name not in (self.FILE, self.LOCK):
                self.files.append(name)

    def status(self, name: str) -> str | None:
        return record.status if (record := self.steps.get(name)) else None

    def begin(self, name: str) -> float:
        self.steps[name] = StepRecord(status=RUNNING, started_at=utc_now())
        self.save()
        return time.monotonic()

    def finish(
        self, name: str, status: Status, began: float, detail: str = "", outputs: StepOutputs | None = None
    ) -> None:
        started, took = self.steps[name].started_at if name in self.steps else None, time.monotonic() - began
        self.steps[name] = StepRecord(
            status=status,
            started_at=started,
            finished_at=utc_now(),
            detail=detail,
            duration_s=round(took, 3),
            outputs=outputs or StepOutputs(),
        )
        self.save()

    def recorded(self) -> bool:
        path = self._out / self.FILE
        return path.exists() or path.is_symlink()

    def read(self: S) -> S:
        """The state recorded in the run's directory; ``UserError`` when it cannot be read as one."""
        try:
            return type(self).load(self._out / self.FILE, follow_symlinks=False)
        except UserError as exc:
            raise UserError(f"{exc}; use another --out.") from None

    def open(self: S, resume: bool = True) -> S:
        """This fresh state (signature and plan of this invocation), or the recorded one when the directory holds
        a run: resumed when ``resume`` and the signatures match, refused otherwise. Saved before it is returned."""
        state, resumed = self, self.recorded()
        if resumed:
            if not resume:
                raise UserError(
                    f"{self._out} already holds a {self.RUN}; pass --resume to finish it, or use another --out."
                )
            recorded = self.read()
            mine, theirs = self.signature.model_dump(mode="json"), recorded.signature.model_dump(mode="json")
            if mine != theirs:
                changed = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
                raise UserError(
                    f"{self._out} holds a {self.RUN} with different {', '.join(changed)}; resuming it would mix two "
                    f"runs. Rerun with the recorded settings (see {self.FILE} there) or use another --out."
                )
            state = self.model_copy(update={"steps": recorded.steps, "runs": recorded.runs, "files": recorded.files})
        state.runs.append(Invocation(started_at=utc_now(), resumed="true" if resumed else "false"))
        state.save()
        return state

    def at(self: S, out: Path) -> S:
        self._out = out
        return self

    @contextmanager
    def opened(self: S, resume: bool = True) -> Iterator[S]:
        """The directory made this user's alone (0700), locked for the block (one run each), the state opened in it."""
        refuse_foreign_link(self._out, "--out ")
        self._out.mkdir(mode=0o700, parents=True, exist_ok=True)
        if (owner := self._out.stat().st_uid) != os.geteuid():
            raise UserError(
                f"--out {self._out}: belongs to {owner_name(owner)}, who could read or replace it; use yours."
            )
        self._out.chmod(0o700)
        with directory_lock(self._out, self.LOCK, what=self.RUN):
            yield self.open(resume)

    def refuse_foreign_out(self) -> None:
        """Refuse a directory the run must not write into (an archive packs what it wrote): a symlink, a file, or
        a non-empty directory without this kind's state file (opening it then checks it is the same run)."""
        if (out := self._out).is_symlink():
            raise UserError(f"--out {out}: is a symbolic link, never written through; name a new directory.")
        if not out.exists():
            return
        if not out.is_dir():
            raise UserError(f"--out {out}: exists and is not a directory; name a new or empty directory.")
        try:
            entries = sorted(set(os.listdir(out)) - {self.LOCK})
        except OSError as exc:
            raise UserError(f"--out {out}: cannot be listed ({exc.strerror or exc}); name another directory.") from None
        if entries and self.FILE not in entries:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise UserError(
                f"--out {out}: is a non-empty directory that holds no {self.RUN} ({shown}); the run would "
                "write there. Name a new or empty directory."
            )

    def statuses(self) -> dict[str, str]:
        """Each recorded unit's status (for a dry run); an unreadable state is said, not fatal."""
        if not self.recorded():
            return {}
        try:
            return {name: step.status for name, step in self.read().steps.items()}
        except UserError as exc:
            print(f"warning: {exc} (a rerun would refuse it); statuses not shown", file=sys.stderr)
            return {}
