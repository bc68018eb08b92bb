"""`qualify CONFIG ...`: the command line (launchers/kimi26-vllm-dflash-qualify.sh and the front door call it)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from kimi_dflash.config.schema import KEY
from kimi_dflash.config.shipped import resolve_config_argument
from kimi_dflash.config.validate import typed_values
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.options import comma_list, declare, option, run
from kimi_dflash.core.user_files import file_kind, read_user_bytes
from kimi_dflash.launch.serve_sh import SERVE_COMMAND, ServerLeftRunning
from kimi_dflash.qualify import bundle, report, tuned_config
from kimi_dflash.qualify.amplitude import probe
from kimi_dflash.qualify.depths import on_aiter
from kimi_dflash.qualify.graphs import GraphCandidate, graph_candidate
from kimi_dflash.qualify.plan import (
    PER_REQUEST_FLAG,
    PerRequest,
    QualifyPlan,
    box_for,
    build_plan,
    parse_duration,
    per_request_setting,
    render,
)
from kimi_dflash.qualify.state import STATE_FILE, QualifySignature, QualifyState
from kimi_dflash.qualify.steps import Context, step_units
from kimi_dflash.runs.orchestrator import run_in_directory, run_units
from kimi_dflash.runs.state import DONE, StepOutputs

if TYPE_CHECKING:
    from kimi_dflash.rules.source import VllmSource

DESCRIPTION = "Qualify a box: is DFlash lossless and worth it here, and with which settings. One command."
EPILOG = """\
--dry-run lists every step with its time estimate for this box; the budget trims the grid (docs/qualify.md).

Output: DIR/report.md (+ PNGs), grid/*.json, results/, lossless/, environment.json, state.json, and DIR.tar.gz
(exactly the files the run wrote) to attach to an issue. DIR must be new, empty or a qualify run of this config
(never a symlink); one run per DIR at a time. Resumable: rerun with --resume after a kill; finished steps are kept.

exit status: 0 every verdict passed; 2 a verdict failed (lossless FAIL, FP8 KV FAIL); 1 could not qualify
(preflight failed, a server did not start or could not be stopped, a step failed, DIR unusable or in use, bad
arguments); 130/143 interrupted (--resume).

examples:
  %(prog)s configs/demo-cpu.env --budget 6m --out /tmp/qualify-demo
  %(prog)s configs/production.env --budget 3h --dry-run
  %(prog)s configs/production.env --project-acceptance 0.8,0.6   # + what a better k=2 drafter would give (GPU)
  %(prog)s configs/demo-cpu.env --candidates configs/demo-cpu.env,configs/demo-cpu-eagle3.env   # drafter shoot-out
  %(prog)s configs/production.env --write-config tuned.env && ./serve.sh tuned.env   # serve what it chose
"""


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{text!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


@dataclass(kw_only=True)
class QualifyOptions:
    USAGE_EXIT: ClassVar[int] = report.EXIT_INFRA  # 2 means a failed verdict here

    config: str = option(
        "the config to qualify: a path, or a shipped config's name (demo-cpu)", positional=True, required=True
    )
    budget: str | None = option(
        "time the run may take, e.g. 20m, 3h (default: 15m on CPU, 4h on GPU); trims the grid", metavar="DURATION"
    )
    out: Path | None = option("report directory (default: qualify-<config name>)")
    slo: str | None = option(
        "the SLO every grid benchmark is judged by, in the benchmark's --slo form (default per box, docs/qualify.md: "
        "GPU ttft:2s,user_tps:12, CPU ttft:1s,user_tps:50); 'none' measures no goodput",
        metavar="SPEC",
    )
    project_acceptance: str | None = option(
        "GPU only: also serve the candidate with vLLM's synthetic acceptance sampler at these per-position rates "
        "(non-increasing, e.g. 0.8,0.6,0.4): the speed a drafter accepting that often would give here, not its quality",
        metavar="RATES",
    )
    no_graphs: bool = option("do not serve an eager config again with graphs on (the GPU's graph-mode candidate)")
    dry_run: bool = option("list the steps with time estimates; run nothing")
    resume: bool = option("finish the run recorded in --out (after a kill)")
    no_plots: bool = option("no PNGs (no matplotlib needed)")
    candidate_env: list[tuple[str, str]] = option(
        "config key set for the candidate only (a check: FABRICATE_DEMO_MODELS=qwen3 on the demo must FAIL)",
        repeatable=True,
        metavar="KEY=VALUE",
        parse=_key_value,
    )
    candidates: tuple[str, ...] = option(
        "a drafter shoot-out: each config measured against CONFIG without speculation, judged lossless and ranked",
        metavar="A.env,B.env",
        default=(),
        parse=comma_list(str, "config files"),
    )
    write_config: Path | None = option(
        "after the run, write TUNED.env: EXTENDS CONFIG (a shoot-out: the candidate ranked first) with what the run "
        "chose, each line with its evidence",
        metavar="TUNED.env",
    )
    serve_sh: Path | None = option(hidden=True)  # tests substitute a stand-in for serve.sh, as for the sweep


add_cli_args = declare(QualifyOptions, DESCRIPTION, EPILOG)


def _config_values(path: Path) -> tuple[dict[str, str], dict[str, str], str | None]:
    """(values as strings, API_KEY left out; the config keys taken from the environment; API_KEY, never stored)."""
    from kimi_dflash.config.problems import ConfigError
    from kimi_dflash.config.schema import KEYS_BY_NAME, shown_values
    from kimi_dflash.config.validate import load_config

    try:
        config = load_config(path, environ=os.environ)
    except ConfigError as error:
        raise UserError(f"{path}: " + "; ".join(p.render() for p in error.problems)) from None
    values = {k: "" if v is None else str(v) for k, v in config.values.items() if k != KEY.API_KEY}
    overrides = shown_values({k: os.environ[k] for k in KEYS_BY_NAME if k in os.environ and k != KEY.API_KEY})
    return values, overrides, config.typed.api_key


def _digest(path: Path) -> str:
    """A config file's identity for --resume: its text's SHA-256, never the text (API_KEY may be in it)."""
    return hashlib.sha256(read_user_bytes(path, what="config file")).hexdigest()


def _per_request_flag(source: VllmSource | None) -> tuple[str, str]:
    from kimi_dflash.preflight.runtime_child import installed_vllm
    from kimi_dflash.rules.features import probe_features

    if source is None:
        return "unknown", "no vLLM found by this Python"
    outcome = probe_features(source, (PER_REQUEST_FLAG,))[0]
    name, version = installed_vllm()
    return outcome.state, f"{name or 'vllm'} {version or '(version unknown)'}: {outcome.evidence}"


def _verify_k_limit(values: dict[str, str], source: VllmSource | None) -> tuple[int, str] | None:
    """For a ROCm plan with AITER MLA on; None when the rule does not apply or the cap is absent."""
    from kimi_dflash.rules.catalog.aiter_mla import aiter_verify_cap

    if not on_aiter(values):
        return None
    cap = None if source is None else aiter_verify_cap(source)
    if cap is None or cap.cap is None:
        return None
    return cap.cap - 1, f"AITER MLA verifies at most {cap.cap} query tokens on its persistent path, {cap.defined_at}"


def _check_variant(config_path: Path, source: VllmSource | None, overrides: dict[str, str]) -> tuple[bool, str]:
    """(passes, detail) of the runtime rules on the config with ``overrides``: a refused variant is left out."""
    from kimi_dflash.config.problems import ConfigError
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.launch.prepare import prepare

    if source is None:
        return False, "no vLLM found by this Python to check it against"
    try:
        config = load_config(config_path, environ={**os.environ, **overrides})
    except ConfigError as error:
        return False, "; ".join(p.render() for p in error.problems)
    verdict = prepare(config, os.environ, source=lambda _plan: source, say=lambda _: None).verdict
    if verdict is not None and verdict.failures:
        return False, "; ".join(f"{f.name}: {f.detail}" for f in verdict.failures)
    return True, ""


def _projection(args: QualifyOptions) -> tuple[float, ...]:
    if not args.project_acceptance:
        return ()
    from kimi_dflash.config.acceptance_rates import parse_acceptance_rates

    try:
        return parse_acceptance_rates(args.project_acceptance)
    except ValueError as exc:
        raise UserError(f"--project-acceptance {args.project_acceptance!r}: {exc}") from None


def _config_file(given: str, hint: str = "") -> Path:
    config = resolve_config_argument(given)
    if config.exists() and not config.is_file():
        raise UserError(f"{given}: is {file_kind(config.stat().st_mode)}, not a config file.")
    if not config.is_file():
        raise UserError(f"{given}: no such config file (nor a shipped config of that name){hint}.")
    return config


def _shootout(
    args: QualifyOptions,
    values: dict[str, str],
    key: str | None,
    per_request: PerRequest,
    budget: float | None,
    source: VllmSource | None,
) -> QualifyPlan:
    from kimi_dflash.qualify.shootout import CandidateConfig, build_shootout

    if args.candidate_env or args.project_acceptance:
        raise UserError("--candidate-env and --project-acceptance concern one candidate: qualify that config alone.")
    configs = []
    for given in args.candidates:
        path = _config_file(given, " (--candidates splits its list at commas: a file name cannot hold one)")
        theirs, _, their_key = _config_values(path)
        limit, amplitude = _verify_k_limit(theirs, source), probe(path, source)
        configs.append(CandidateConfig(given, path.resolve(), theirs, limit, their_key == key, amplitude))
    return build_shootout(values, configs, budget, args.slo, per_request)


def _context(args: QualifyOptions) -> tuple[Context, QualifyPlan]:
    config = _config_file(args.config)
    if args.serve_sh is not None and not args.serve_sh.is_file():
        raise UserError(f"{args.serve_sh}: no such file")
    from kimi_dflash.rules.source import VllmSource

    values, overrides, key = _config_values(config)
    source = VllmSource.installed()  # read, never imported; shared by every probe below
    per_request = per_request_setting(values, overrides, _per_request_flag(source))
    budget = parse_duration(args.budget) if args.budget else None
    if args.candidates:
        plan = _shootout(args, values, key, per_request, budget, source)
    else:
        typed = typed_values(values)
        k, box_kind = typed.num_speculative_tokens, box_for(typed.device).kind
        check = functools.partial(_check_variant, config, source)
        graphs = GraphCandidate(False, "--no-graphs") if args.no_graphs else graph_candidate(values, k, box_kind, check)
        limit, rates, rope = _verify_k_limit(values, source), _projection(args), probe(config, source)
        depth = check({KEY.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE: f"1-:{k}"})
        plan = build_plan(values, budget, args.slo, per_request, limit, rates, graphs, amplitude=rope, schedule=depth)
    if args.write_config is not None:  # before anything runs
        tuned_config.check_target(args.write_config, config, [Path(c.path) for c in plan.candidates])
    out = args.out or Path(f"qualify-{config.name.removesuffix('.env')}{'-shootout' if args.candidates else ''}")
    serve = SERVE_COMMAND if args.serve_sh is None else (str(args.serve_sh.resolve()),)
    ctx = Context(
        config=config.resolve(),
        config_as_given=args.config,
        values=values,
        overrides=overrides,
        plan=plan,
        out=out,
        serve_command=serve,
        candidate_env=tuple(args.candidate_env),
    )
    return ctx, plan


def main(args: QualifyOptions) -> int:
    ctx, plan = _context(args)  # a UserError here or below exits EXIT_INFRA (USAGE_EXIT, through options.run)
    names = ("k_values", "sessions", "bench_args", "server_env", "projection", "amplitudes")
    planned = {name: getattr(plan, name) for name in names}
    candidates = {c.path: _digest(Path(c.path)) for c in plan.candidates}
    signature = QualifySignature(
        config=str(ctx.config),
        config_sha256=_digest(ctx.config),
        overrides=ctx.overrides,
        candidate_env=ctx.candidate_env,
        graphs=plan.graph_overrides,
        candidates=candidates,
        **planned,
    )
    fresh = QualifyState(signature=signature, plan=plan).at(ctx.out)
    fresh.refuse_foreign_out()
    if args.dry_run:
        print("\n".join(render(plan, args.config, fresh.statuses())))
        return 0

    def body(state: QualifyState) -> int:
        return _run(dataclasses.replace(ctx, record=state.record), state, args)

    return run_in_directory(fresh, body, "qualify", "rerun with --resume", resume=args.resume)


def _run(ctx: Context, state: QualifyState, args: QualifyOptions) -> int:
    say = functools.partial(print, file=sys.stderr)
    say("\n".join(render(ctx.plan, args.config)))
    try:
        tally = run_units(step_units(ctx), state, "qualify", stops_the_run=("preflight",))
        if tally.stopped_at:
            stop = "stopping here (the plan would not run right). Fix what it names and rerun with --resume."
            say(f"qualify: {tally.stopped_at} failed; {stop}")
    except ServerLeftRunning as exc:  # the run stops: another server would compete with it; the report says so
        say(f"qualify: error: {exc}")
    began = state.begin("report")
    path, code, plots = report.write_report(ctx.out, state, args.config, plots=not args.no_plots)
    copied = bundle.copy_results(ctx.out, args.config)
    for c in ctx.plan.candidates:  # a shoot-out's candidates: their own k values, named for their configs
        copied += bundle.copy_results(ctx.out, c.config, ctx.candidate(c.name).grid_dir)
    state.record(path, *plots, *copied)
    outputs = StepOutputs(files=[p.relative_to(ctx.out).as_posix() for p in (path, *plots, *copied)], exit_code=code)
    state.finish("report", DONE, began, f"report.md, {len(plots)} plot(s), {len(copied)} result file(s)", outputs)
    # The report lists the steps: write it again so it shows the report step itself, then pack what the run wrote.
    path, code, _ = report.write_report(ctx.out, state, args.config, plots=False)
    tarball, refused = bundle.archive(ctx.out, [STATE_FILE, *state.files])
    print(path.read_text(encoding="utf-8"))
    if refused:
        say(f"qualify: left out of the archive: {'; '.join(refused)}")
    if state.server_left:
        say(f"qualify: error: {state.server_left}")
    say(f"qualify: report {path}; archive to attach to an issue: {tarball}; exit {code}")
    if args.write_config is not None:
        try:
            say(tuned_config.write(ctx, args.write_config))
        except (OSError, UserError) as exc:
            say(f"qualify: error: {args.write_config}: not written: {exc}")
            return code or report.EXIT_INFRA
    return code


if __name__ == "__main__":
    sys.exit(run(__name__, prog="kimi26-vllm-dflash-qualify.sh"))
