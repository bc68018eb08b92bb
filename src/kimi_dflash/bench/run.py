"""One benchmark run: the levels measured, the result kept current on disk, signals, the exit status (bench/cli.py
parses the command line and imports this only to run: aiohttp and pydantic are not needed to refuse one)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from kimi_dflash.bench import descriptors, eventloop, export_csv, report
from kimi_dflash.bench.metrics import percentile_key
from kimi_dflash.bench.output_file import OutputWriteError, ResultFile
from kimi_dflash.bench.result import SCHEMA, SCHEMA_VERSION, BenchmarkResult, RunInfo, ToolInfo
from kimi_dflash.bench.runner import Benchmark, RunState, Stopper
from kimi_dflash.bench.settings import Settings
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.formatting import utc_now


def _connections(settings: Settings) -> tuple[int, str]:
    """The most connections the run holds at once, and the options that ask for them."""
    most, what = max(settings.levels), f"--sessions {max(settings.levels)}"
    ol = settings.open_loop
    if ol is not None:
        in_flight = min(ol.sessions_per_level, ol.max_concurrency or ol.sessions_per_level)
        if in_flight > most:
            cap = f" (--max-concurrency {ol.max_concurrency})" if ol.max_concurrency else ""
            most, what = in_flight, f"--num-sessions {ol.sessions_per_level}{cap}"
    return most, what


class ResultWriter:
    """Keeps the document current on disk (bench/output_file.py) and prints each finished level once."""

    def __init__(self, path: Path, tool: ToolInfo, run: RunInfo, settings: Settings) -> None:
        self.file, self.tool, self.run, self.settings = ResultFile(path), tool, run, settings
        self.printed = self.saved_levels = 0  # levels printed; levels in the document on disk
        self.csv_percentiles: tuple[str, ...] | None = None  # --csv: the extra percentile columns
        self.write_error: OutputWriteError | None = None

    def document(self, state: RunState, levels: int | None = None) -> BenchmarkResult:
        settings = self.settings.recorded(state.model)
        return BenchmarkResult(
            schema=SCHEMA,
            schema_version=SCHEMA_VERSION,
            tool=self.tool,
            run=self.run,
            settings=settings,
            server=state.server,
            warmup=state.warmup,
            results=state.results if levels is None else state.results[:levels],
        )

    def _write(self, document: BenchmarkResult) -> None:
        self.file.write(document.to_json_text(), has_levels=bool(document.results))
        self.saved_levels = len(document.results)

    def checkpoint(self, state: RunState) -> None:
        for result in state.results[self.printed :]:
            report.print_level(result, sys.stdout)
            sys.stdout.flush()
        self.printed = len(state.results)
        if self.write_error is not None:
            return
        try:
            self._write(self.document(state))
            if self.csv_percentiles is not None and state.results and self.file.written is not None:
                try:
                    export_csv.write_csv(
                        self.file.path, state.results, state.level_records, state.origin, self.csv_percentiles
                    )
                except OSError as exc:  # the same rules as the JSON: one clear error, the JSON stays complete
                    raise OutputWriteError(f"cannot write the CSV files beside {self.file.path}: {exc}") from exc
        except OutputWriteError as error:
            lost = len(state.results) - self.saved_levels
            self.write_error = OutputWriteError(
                f"{error}. The file keeps the last document written ({self.saved_levels} level(s))"
                + (f"; {lost} level(s) measured since are only in the output above" if lost else "")
                + ". Free space (or fix the path) and run again."
            )
            raise self.write_error from None

    def finish(self, state: RunState, status: str, detail: str, exit_code: int) -> BenchmarkResult:
        self.run = dataclasses.replace(
            self.run, status=status, status_detail=detail or None, finished_at=utc_now(), exit_code=exit_code
        )
        document = self.document(state)
        if self.write_error is not None:
            # Best effort: the levels already on disk with a status that says what happened (a smaller or
            # equal document; if even that does not fit, the file keeps saying "running").
            try:
                self._write(self.document(state, levels=self.saved_levels))
            except OutputWriteError:
                note = f"note: could not record the failure in {self.file.path}; it still says 'running'"
                print(note, file=sys.stderr)
        elif self.file.written is not None or state.results:
            self.checkpoint(state)
        return document


async def _run(cfg: Settings, writer: ResultWriter) -> int:
    stopper = Stopper()
    loop = asyncio.get_running_loop()

    def on_signal(name: str, code: int) -> None:
        if stopper.stopped:  # second signal: the user means it; checkpoints on disk are complete files
            print(f"\n{name} again: exiting now", file=sys.stderr)
            os._exit(code)
        print(f"\n{name}: stopping; finished requests are kept and written to {writer.file.path}", file=sys.stderr)
        stopper.trigger("interrupted", name, code)

    for signum, name, code in ((signal.SIGINT, "SIGINT", 130), (signal.SIGTERM, "SIGTERM", 143)):
        try:
            loop.add_signal_handler(signum, on_signal, name, code)
        except (NotImplementedError, RuntimeError):  # not on this platform: Ctrl-C then ends the run hard
            pass

    bench = Benchmark(cfg, stopper, writer.checkpoint)
    try:
        state = await bench.run()
    except Exception as exc:  # noqa: BLE001 - a bug must not lose the results so far: written, then shown
        if isinstance(exc, UserError):
            status, detail, code, shown = "failed", str(exc), exc.exit_code, f"error: {exc}"
        else:
            traceback.print_exc()
            detail = f"{type(exc).__name__}: {exc}"
            status, code, shown = "crashed", 1, f"benchmark crashed ({detail})"
        try:
            writer.finish(bench.state, status, detail, code)
        except OutputWriteError as write_error:
            print(f"error: {write_error}", file=sys.stderr)
        print(shown, file=sys.stderr)
        _say_where(writer.file)
        return code
    try:
        document = writer.finish(state, stopper.status, stopper.detail, stopper.exit_code)
    except OutputWriteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    report.print_summary(document, sys.stdout)
    _say_where(writer.file)
    return stopper.exit_code


def _say_where(file: ResultFile) -> None:
    """Where this run's document is, only when it really is there (never a false "results are in X")."""
    if file.written == file.partial:
        kept = f"the earlier result in {file.path} was kept (this run measured no level)"
        print(f"{kept}; this run's record is in {file.written}", file=sys.stderr)
    elif file.written is not None:
        backup = f" (the earlier result is now {file.backup})" if file.replaced else ""
        print(f"result written to {file.written}{backup}", file=sys.stderr)


def run(settings: Settings) -> int:
    """Measure every level of ``settings``, writing the result as it goes; the exit status (bench/cli.py's epilog)."""
    settings.resolve()  # reads the dataset
    started = utc_now()
    default_output = Path("results") / f"benchmark-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    output = Path(settings.output) if settings.output else default_output
    event_loop = eventloop.loop_name(prefer_uvloop=not settings.no_uvloop)
    command_line = report.redact_argv(settings.command_line)
    run_meta = RunInfo(label=settings.label, started_at=started, status="running", command_line=command_line)
    writer = ResultWriter(output, report.tool_info(event_loop), run_meta, settings)
    if settings.csv:
        writer.csv_percentiles = tuple(percentile_key(q) for q in settings.percentiles or ())
    writer.file.check(export_csv.paths_for(writer.file.path) if settings.csv else ())
    note = descriptors.ensure(*_connections(settings))
    if note:
        print(note, file=sys.stderr)
    return eventloop.run(_run(settings, writer), prefer_uvloop=not settings.no_uvloop)
