"""A sweep point as a unit of the run: serve, benchmark every level, stop, write the result (or a failure record)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from kimi_dflash.bench.result import ServerConfig, load_result
from kimi_dflash.config.schema import KEY, shown_values
from kimi_dflash.core.errors import UserError
from kimi_dflash.launch.serve_sh import RECORD_FILE, SERVE_COMMAND, ServeSh, tail
from kimi_dflash.runs.orchestrator import Outcome, Say, Tally, Unit, run_units
from kimi_dflash.runs.state import DONE, FAILED, RunState, StepOutputs
from kimi_dflash.sweep import state
from kimi_dflash.sweep.grid import Point

OnReady = Callable[[str], None]  # runs with the server's base URL while it is up, before the benchmark


@dataclass(frozen=True)
class PointPlan:
    config: Path
    points: list[Point]
    sessions: tuple[int, ...]
    bench_args: list[str]
    out: Path
    serve_command: tuple[str, ...] = SERVE_COMMAND  # serve.sh, or what it runs
    config_as_given: str = ""  # stored in results (an absolute path would name this machine's directories)
    server_env: tuple[tuple[str, str], ...] = ()  # config keys for every server, under each point's overrides
    api_key: str | None = field(default=None, repr=False)  # to the benchmark's environment only, never stored
    python: str = sys.executable

    @property
    def servers(self) -> ServeSh:
        return ServeSh(self.config, self.out / RECORD_FILE, self.serve_command, self.python)

    @cached_property
    def spec_method(self) -> str:
        """A positive NUM_SPECULATIVE_TOKENS serves the config's own method, else DFlash (none, or it won't load)."""
        from kimi_dflash.config.problems import ConfigError
        from kimi_dflash.config.validate import load_config

        try:
            method = load_config(self.config, environ=os.environ).typed.speculative_method
        except (ConfigError, OSError):
            return "dflash"
        return "dflash" if method == "none" else method

    def env(self, point: Point) -> dict[str, str]:
        return {**dict(self.server_env), **point.server_env(self.spec_method)}


def _failed(plan: PointPlan, point: Point, stage: str, detail: str, log_tail: list[str]) -> Outcome:
    path = state.failure_path(plan.out, point)
    state.Failure(point=point.name, stage=stage, detail=detail, log_tail=log_tail).save(path)  # type: ignore[arg-type]
    what = "the server did not start" if stage == "server" else "the benchmark did not complete"
    return Outcome(FAILED, f"{what} ({detail})", StepOutputs(files=[path.name]))


def run_point(plan: PointPlan, point: Point, say: Say, on_ready: OnReady | None = None) -> Outcome:
    """Start, (``on_ready``,) benchmark, stop; a failure is recorded and returned; ``on_ready``'s errors propagate."""
    env = plan.env(point)
    state.failure_path(plan.out, point).unlink(missing_ok=True)
    with plan.servers.serving(point.name, env, state.server_log(plan.out, point), say) as started:
        if started.detail:
            return _failed(plan, point, "server", started.detail, list(started.log_tail))
        if on_ready is not None:
            on_ready(started.base_url)
        return benchmark_point(plan, point, started.port, say)


def benchmark_point(plan: PointPlan, point: Point, port: int, say: Say) -> Outcome:
    """The benchmark of a point whose server listens on ``port`` (started by ``run_point``, or one up already)."""
    env = plan.env(point)
    partial = plan.out / "partial" / f"{point.name}.json"
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.unlink(missing_ok=True)
    levels = ",".join(map(str, plan.sessions))
    command = [plan.python, "-m", "kimi_dflash.bench", "--base-url", f"http://127.0.0.1:{port}", "--sessions", levels]
    command += ["--label", point.name, "--output", str(partial), *plan.bench_args]
    say(f"benchmarking at {levels} sessions")
    bench_log = state.bench_log(plan.out, point)
    bench_log.parent.mkdir(parents=True, exist_ok=True)  # run_point's server made it; a server up already did not
    with bench_log.open("w", encoding="utf-8") as log:
        # Not `env`: that is the point's server environment, read again below for the result's config values.
        bench_env = None if plan.api_key is None else {**os.environ, "OPENAI_API_KEY": plan.api_key}
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=bench_env)
        assert process.stdout is not None
        try:
            for line in process.stdout:
                log.write(line)
                print(f"    {line.rstrip()}", file=sys.stderr, flush=True)
            code = process.wait()
        except BaseException:
            process.send_signal(signal.SIGINT)  # the benchmark writes what it has, then exits
            process.wait(timeout=60)
            raise
    detail = f"benchmark exited {code}"
    try:
        result = load_result(partial)
    except UserError as exc:
        result, detail = None, f"{detail}; {exc}"
    if result is None or code != 0 or result.run.status != "complete":
        if result is not None and result.run.status_detail:
            detail = f"{detail}: {result.run.status_detail}"
        return _failed(plan, point, "benchmark", detail, tail(bench_log))
    config, overrides = plan.config_as_given or plan.config.name, shown_values(dict(point.overrides))
    server_config = ServerConfig(config=config, overrides=overrides, values=_config_values(plan.config, env))
    path = state.result_path(plan.out, point)
    dataclasses.replace(result, server_config=server_config).save(path)
    partial.unlink(missing_ok=True)
    return Outcome(DONE, f"{point.label}: benchmarked", StepOutputs(files=[path.name]))


def _config_values(config_path: Path, env: dict[str, str]) -> dict[str, str]:
    """Every config key the point's server ran with (PORT, picked per run, and API_KEY left out)."""
    from kimi_dflash.config.validate import load_config

    config = load_config(config_path, environ={**os.environ, **env})
    return {k: v for k, v in shown_values(config.values).items() if k not in (KEY.API_KEY, KEY.PORT)}


Hooks = Callable[[Point], OnReady | None]  # a point's own ``on_ready`` (None: none)


def point_units(plan: PointPlan, on_ready: Hooks = lambda point: None) -> list[Unit]:
    """The plan's points as units: a point is finished when its result file is complete."""
    return [
        Unit(
            point.name,
            lambda say, p=point: run_point(plan, p, say, on_ready(p)),
            label=point.label,
            finished=lambda p=point: state.finished_result(plan.out, p) is not None,
        )
        for point in plan.points
    ]


def run_points(
    plan: PointPlan, run_state: RunState | None = None, what: str = "sweep", on_ready: Hooks = lambda point: None
) -> Tally:
    """Every unfinished point of the plan (after stopping a server an earlier run left up)."""
    plan.out.mkdir(parents=True, exist_ok=True)
    if run_state is not None:
        run_state.record(*(path for point in plan.points for path in state.point_files(plan.out, point)))
    plan.servers.stop_leftover(lambda text: print(f"{what}: {text}", file=sys.stderr, flush=True))
    return run_units(point_units(plan, on_ready), run_state, what, "points")
