"""Where the benchmark's result goes, without ever losing an earlier one (the rules: docs/benchmark.md, "Quick start",
``--output``). An ownership check could change before the write, so links are refused outright and every write
renames a fresh file into place."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from kimi_dflash.core.atomic_write import check_target, replacing, write_beside, write_text_atomic
from kimi_dflash.core.errors import UserError

EXIT_WRITE_FAILED = 4
DEV_NULL = Path(os.devnull)


class OutputWriteError(UserError):
    """The result could not be written mid-run; the file holds the last document written."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_WRITE_FAILED)


def _is_dev_null(path: Path) -> bool:
    try:
        return os.path.samefile(path, DEV_NULL)
    except OSError:
        return False


class ResultFile:
    def __init__(self, requested: Path | str) -> None:
        requested = Path(requested).expanduser()
        self.discard = not requested.is_symlink() and _is_dev_null(requested)
        self.path = requested
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.backup = self.path.with_name(f"{self.path.stem}.previous{self.path.suffix or '.json'}")
        self.protect = False  # an earlier result is there: keep it until this run has a level
        self.replaced = False  # this run's document has taken the target's place
        self.written: Path | None = None  # where this run's latest document is

    def check(self, beside: tuple[Path, ...] = ()) -> None:
        """Refuse, before anything is measured, an output (or a ``beside`` file) that cannot be written."""
        if self.discard:
            return
        for path in (self.path, self.partial, self.backup, *beside):
            if path.is_symlink():
                raise UserError(
                    f"--output: {path} is a symbolic link (to {os.readlink(path)}); the benchmark never writes "
                    "through a link. Name the file itself, or remove the link."
                )
        check_target(self.path, "--output ")
        self.protect = self.path.is_file() and self.path.stat().st_size > 0

    def write(self, text: str, has_levels: bool) -> Path | None:
        """Write this run's document; on OutputWriteError the previous document stays where it was."""
        if self.discard:
            return None
        try:
            if not self.protect or self.replaced:
                write_text_atomic(self.path, text)
                self.written = self.path
            elif not has_levels:
                write_text_atomic(self.partial, text)
                self.written = self.partial
            else:  # the first level is in: the earlier result moves aside, this run's takes its place
                temporary = write_beside(self.path, text.encode("utf-8"))
                try:
                    self.backup.unlink(missing_ok=True)
                    try:  # a second name for the earlier result: the target is never missing
                        os.link(self.path, self.backup)
                    except OSError:  # a copy under a fresh name, renamed over whatever is there (never followed)
                        with replacing(self.backup, mode=stat.S_IMODE(self.path.stat().st_mode)) as copy:
                            shutil.copy2(self.path, copy)
                    os.replace(temporary, self.path)
                finally:
                    temporary.unlink(missing_ok=True)
                self.replaced = True
                self.written = self.path
                self.partial.unlink(missing_ok=True)
        except OSError as error:
            reason = "no space left on the device" if error.errno == errno.ENOSPC else error.strerror or error
            raise OutputWriteError(f"cannot write the result to {self.path}: {reason}") from None
        return self.written
