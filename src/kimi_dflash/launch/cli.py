"""`serve.sh` in Python: validate the config, run preflight, check/apply patches, start vLLM."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from kimi_dflash.config.problems import ConfigError, Problem
from kimi_dflash.config.schema import KEY, KEYS
from kimi_dflash.config.shipped import resolve_config_argument
from kimi_dflash.config.validate import Config, load_config
from kimi_dflash.core.envvars import CACHE as CACHE_ENV
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.options import declare, option, run
from kimi_dflash.core.paths import cache_root
from kimi_dflash.launch import ownership
from kimi_dflash.launch.prepare import Prepared, prepare
from kimi_dflash.launch.private_files import UnsafeLocation, private_dir
from kimi_dflash.launch.server import (
    StartInterrupted,
    run_foreground,
    running_server,
    start_and_wait,
    stop_detached,
    stop_orphans,
)

EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130

DESCRIPTION = """\
Launch vLLM's OpenAI-compatible server for Kimi K2.6 + DFlash from an env-file config.

Steps: validate the config -> preflight (will this vLLM start this plan, will the plugin load) -> vLLM patches ->
start vLLM. Override config values for one run from the environment, e.g. PORT=9000 ./serve.sh configs/demo-cpu.env
"""

EPILOG = """\
examples:
  ./serve.sh configs/production.env --dry-run     print the exact vllm command and environment
  ./serve.sh configs/production.env --preflight   check the machine only
  ./serve.sh configs/production.env --check-vllm /path/to/site-packages/vllm
                                                  will that vLLM start this plan? (reads its source only)
  ./serve.sh configs/demo-cpu.env --wait          start the CPU demo in the background, return when ready
  ./serve.sh configs/demo-cpu.env --stop          stop a server started with --wait
exit codes: 0 ok, 1 preflight/patch/start failure (also: --wait found a server or another start on that port, or
another server answered there; --stop refused a pid file that does not prove the process is ours; a cache, run or
log directory other users can write was refused), 2 invalid config (--check-vllm: 2 = that vLLM would not start
this plan), 130 interrupted during --wait (what was starting has been stopped); otherwise vLLM's own exit code.
"""


@dataclass(kw_only=True)
class ServeOptions:
    ABBREVIATIONS: ClassVar[bool] = False

    config: str | None = option(
        "env-file config: a path, or the name of a config shipped with the package (e.g. "
        "demo-cpu = configs/demo-cpu.env; default: production)",
        positional=True,
    )
    dry_run: bool = option(
        "print the launch plan (shell-quoted, secrets redacted) and exit without touching anything", exclusive="mode"
    )
    preflight: bool = option("run only the preflight checks", exclusive="mode")
    stop: bool = option("stop the server a previous --wait started", exclusive="mode")
    check_vllm: Path | None = option(
        "judge the plan against the vLLM at DIR (its `vllm` package directory, a directory holding it, or a .whl) from "
        "its source, without starting anything (docs/compatibility.md). Exit 0: it starts; 2: it would not (each "
        "reason with its fix)",
        metavar="DIR",
        exclusive="mode",
    )
    wait: bool = option(
        "start vLLM in the background and return once /health and a one-token completion succeed "
        "(exit 1 with the log tail if it dies or READY_TIMEOUT_S passes)"
    )
    log: Path | None = option(
        "also write vLLM's output to this file (with --wait default: <cache>/logs/serve-<port>.log)"
    )
    fix_numa: bool = option("as root, set kernel.numa_balancing=0 when preflight finds it on")
    skip_preflight: bool = option("start without preflight checks")
    # The dry engine moved to the lab (python -m kimi_dflash_lab dry-engine); existing scripts may still pass this.
    no_dry_engine: bool = option(hidden=True)


add_cli_args = declare(ServeOptions, DESCRIPTION, EPILOG)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def report_problems(problems: list[Problem] | tuple[Problem, ...]) -> None:
    for problem in problems:
        say(problem.render())


def logs_dir() -> Path:
    return cache_root() / "logs"


def _private_dirs(*children: Path) -> None:
    """This user's alone (UnsafeLocation if not): what another user wrote there would be used by this start."""
    private_dir(cache_root())
    for child in children:
        private_dir(child, follow_symlinks=False)


def stop_command(config: Config, config_argument: str, environ: dict[str, str] | None = None) -> str:
    """With the config keys this run took from the environment and the cache override, shell-quoted; never a secret."""
    environ = dict(os.environ) if environ is None else environ
    kept = {key.name: key.shown for key in KEYS if config.sources.get(key.name) == "environment" and not key.secret}
    kept |= {CACHE_ENV: str} if environ.get(CACHE_ENV) else {}
    assignments = [f"{name}={shlex.quote(shown(environ[name]))}" for name, shown in kept.items() if name in environ]
    return " ".join([*assignments, "./serve.sh", shlex.quote(config_argument), "--stop"])


def since_process_start() -> float:
    """Seconds since this process started (Linux: /proc), else 0: the interpreter's and the imports' share."""
    with contextlib.suppress(OSError, ValueError, IndexError, AttributeError):
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return 0.0


def main(args: ServeOptions) -> int:
    spent, clock = {"python and imports": since_process_start()}, time.monotonic()
    args.config = str(resolve_config_argument(args.config))
    try:
        config = load_config(args.config)
    except ConfigError as error:
        report_problems(error.problems)
        say(f"serve: {len(error.problems)} problem(s) in {args.config}; nothing was started.")
        return EXIT_CONFIG
    report_problems(config.warnings)

    pid_path = cache_root() / "run" / f"serve-{config.typed.port}.pid"
    if args.stop:
        return stop(pid_path)

    if args.check_vllm is not None:
        return check_vllm(config, args.check_vllm)

    if not args.dry_run:  # from here on the cache is written (demo models) and read by vLLM
        try:
            _private_dirs()
        except UnsafeLocation as error:
            say(f"serve: {error}. Nothing was started.")
            return 1
    spent["config"] = time.monotonic() - clock
    try:
        prepared = prepare(config, os.environ, create=not args.dry_run, say=say)
    except UserError as error:
        say(f"serve: {error}. Nothing was started.")
        return error.exit_code
    spent.update(prepared.seconds)
    path_problems = list(prepared.problems)
    if args.preflight:  # preflight checks the checkpoint directories itself, in more depth
        path_problems = [p for p in path_problems if p.key not in (KEY.MODEL_DIR, KEY.DRAFT_MODEL_DIR)]
    if args.dry_run:  # nothing will start, so nothing on disk is an error yet
        path_problems = [dataclasses.replace(p, severity="warning") for p in path_problems]
    report_problems(path_problems)
    path_errors = [p for p in path_problems if p.severity == "error"]
    if path_errors and not args.preflight:  # --preflight goes on: its report covers the whole machine
        return EXIT_CONFIG

    if args.dry_run:
        print(prepared.plan.render())
        return 0
    if (log_problem := _log_problem(args.log)) and not args.preflight:
        say(f"serve: --log {args.log}: {log_problem}; nothing was started.")
        return EXIT_CONFIG

    clock = time.monotonic()
    if not args.skip_preflight or args.preflight:
        ok = prepared.preflight(fix_numa=args.fix_numa, say=say, starting=not args.preflight)
        if args.preflight:
            return 0 if ok and not path_errors else 1
        if not ok:
            say("serve: preflight failed; fix the lines marked FAIL (or pass --skip-preflight).")
            return 1
    spent["preflight"], clock = time.monotonic() - clock, time.monotonic()
    if not prepared.patch(say=say):
        return 1
    spent["patches"] = time.monotonic() - clock
    return start(prepared, args, pid_path, spent)


def check_vllm(config: Config, vllm_dir: Path) -> int:
    """`--check-vllm DIR`: the compatibility report for this plan and that vLLM; exit 0 starts, 2 would not."""
    from kimi_dflash.rules.source import VllmSource, VllmSourceError

    try:
        source = VllmSource.open(vllm_dir)
    except VllmSourceError as error:
        say(f"serve: --check-vllm: {error}")
        return EXIT_CONFIG
    verdict = prepare(config, {}, source=lambda _plan: source).verdict
    assert verdict is not None  # a source was given
    print(verdict.render())
    return verdict.exit_code


def _log_problem(log: Path | None) -> str | None:
    """Why vLLM's output cannot be appended to ``log`` (None: it can). Checked before anything starts."""
    if log is None:
        return None
    if log.is_dir():
        return "is a directory; give a file path (e.g. LOG_DIR/serve.log)"
    if log.exists() and not (log.is_file() or log.is_char_device()):  # a FIFO would block the start
        return "is not a regular file (nor a device such as /dev/null)"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        if log.exists():
            with log.open("ab"):
                pass
        elif not os.access(log.parent, os.W_OK | os.X_OK):  # not created here: a start refused later leaves no file
            return f"cannot be created (no write access to {log.parent})"
    except OSError as error:
        return f"cannot be written ({error.strerror or error})"
    return None


def _under_port_lock(pid_path: Path, action: Callable[[], int], undone: str, *dirs: Path) -> int:
    """``action`` under the port's lock (two starts at once give one server and one refusal), in private dirs."""
    lock = pid_path.with_suffix(".lock")
    try:
        _private_dirs(pid_path.parent, *dirs)
        with ownership.port_lock(lock):
            return action()
    except ownership.StartInProgress:
        say(
            f"serve: another serve.sh is starting or stopping a server on this port right now (lock {lock}); "
            "nothing was done. Wait for it, or Ctrl-C it."
        )
        return 1
    except UnsafeLocation as error:
        say(f"serve: {error}. Nothing was {undone}.")
        return 1
    except StartInterrupted:
        return EXIT_INTERRUPTED


def stop(pid_path: Path) -> int:
    """`--stop`: under the port's lock, stop the recorded server only when it is provably ours."""

    def stop_recorded() -> int:
        outcome = stop_detached(pid_path, say=say)
        say(f"serve: {outcome.message}")
        return 0 if outcome.ok else 1

    return _under_port_lock(pid_path, stop_recorded, "stopped")


def start(prepared: Prepared, args: ServeOptions, pid_path: Path, spent: dict[str, float]) -> int:
    plan = prepared.plan
    if not args.wait:
        say(f"serve: starting vLLM for {plan.served_model_name} on {plan.base_url}")
        return run_foreground(plan, args.log)
    return _under_port_lock(
        pid_path,
        lambda: _start_detached(prepared, args, pid_path, spent),
        "started",
        *([] if args.log else [logs_dir()]),
    )


def _start_detached(prepared: Prepared, args: ServeOptions, pid_path: Path, spent: dict[str, float]) -> int:
    config, plan = prepared.config, prepared.plan
    try:
        existing = running_server(pid_path)
    except ownership.PidFileError as error:
        say(f"serve: {pid_path} is not a server record ({error}); remove it once no server of yours runs.")
        return 1
    if existing is not None:
        say(
            f"serve: a server from an earlier --wait is still running (pid {existing.pid}); "
            f"stop it first: {stop_command(config, args.config)}"
        )
        return 1
    pid_path.unlink(missing_ok=True)  # stale: its process is gone (or is not ours)
    stop_orphans(plan.port, say)
    stages = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in spent.items())
    say(f"serve: {sum(spent.values()):.1f} s before vLLM starts: {stages}")
    say(f"serve: starting vLLM for {plan.served_model_name} on {plan.base_url}")
    log_path = args.log or logs_dir() / f"serve-{config.typed.port}.log"
    timeout_s = float(config.typed.ready_timeout_s)
    api_key = config.typed.api_key
    if start_and_wait(plan, log_path, pid_path, timeout_s, api_key, say, private_log=args.log is None) is None:
        return 1
    say(f"serve: stop it with: {stop_command(config, args.config)}")
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="serve.sh"))
