"""Command line of the multi-turn benchmark (payload/benchmark_multi_turn.py is a thin wrapper)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kimi_dflash.bench import (
    cli_options,
    datasets,
    descriptors,
    eventloop,
    export_csv,
    report,
    request_shaping,
)
from kimi_dflash.bench.client import Endpoint, normalize_base_url
from kimi_dflash.bench.level_extras import percentile_key
from kimi_dflash.bench.openloop import OpenLoopConfig
from kimi_dflash.bench.output_file import OutputWriteError, ResultFile
from kimi_dflash.bench.progress import DEFAULT_INTERVAL_S
from kimi_dflash.bench.result import SCHEMA, SCHEMA_VERSION, BenchmarkResult, RunInfo, Settings, ToolInfo
from kimi_dflash.bench.runner import Benchmark, RunConfig, RunState, Stopper
from kimi_dflash.bench.workload import BUILTIN, Dataset, load_dataset, unencodable_at
from kimi_dflash.core import redaction
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.redaction import RedactingArgumentParser

# What ./serve.sh starts by default (PORT in the config schema; a test keeps the two equal). The benchmark
# cannot import the config package: it runs on a client box with aiohttp + numpy + pydantic only.
DEFAULT_BASE_URL = "http://127.0.0.1:8262"

DESCRIPTION = """\
Multi-turn streaming benchmark for an OpenAI-compatible server (vLLM), built to measure speculative
decoding honestly. N concurrent sessions each hold a T-turn conversation (assistant replies are carried
into the next turn, so prompts grow); every level of --sessions is measured separately.

Metrics (docs/benchmark.md): TTFT = first token-bearing chunk - send; E2EL = last token-bearing chunk -
send; N = usage.completion_tokens; TPOT = (E2EL - TTFT) / (N - 1); per-user tok/s = 1/TPOT (and N/E2EL,
labelled); output tok/s = sum of N / wall time of the measured window. Speculative-decoding acceptance comes
from /metrics counter deltas taken after warmup.
"""

EPILOG = """\
examples:
  %(prog)s                      # the server ./serve.sh started on this machine, its only model
  %(prog)s --sessions 8,16,32 --turns-per-session 5 --max-tokens 512 --label dflash \\
      --output results/dflash.json
  %(prog)s --base-url http://gpu-box:8262 --model kimi-k2.6 --sessions 32 --repeats 3 \\
      --dataset my_prompts.jsonl

exit status: 0 finished (failed requests are counted in the result, not fatal); 2 bad arguments, server
unreachable at start, model not served (or several served and no --model); 3 the server went away
mid-run (partial results written); 4 the result could not be written mid-run (disk full: the file keeps the
last level written); 5 this machine ran out of file descriptors, local ports or memory mid-run (not the
server's fault; partial results written); 130/143 interrupted by Ctrl-C/SIGTERM (partial results written).
"""


def _positive_int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return tuple(dict.fromkeys(values))  # drop duplicates, keep the order given


def _bounded(kind: type, low: float, name: str) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number, got {text!r}")
        if value < low:
            raise argparse.ArgumentTypeError(f"{name} must be >= {low}, got {text!r}")
        return value

    return parse


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = RedactingArgumentParser(
        prog=prog,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # "--api K" must not be taken for --api-key (and then stored unredacted)
    )
    target = parser.add_argument_group("server")
    target.add_argument(
        "--base-url",
        default=DEFAULT_BASE_URL,
        help="server root, with or without /v1 (default %(default)s: where ./serve.sh listens)",
    )
    target.add_argument(
        "--model",
        default=None,
        help="model name to request (default: the model /v1/models lists; required when it lists several)",
    )
    target.add_argument(
        "--api-key",
        default=None,
        help="bearer token (default: $OPENAI_API_KEY, then $VLLM_API_KEY); never printed or stored",
    )
    target.add_argument(
        "--metrics-url",
        default=None,
        help="Prometheus endpoint for spec-decode counters (default: <base-url>/metrics; 'none' disables)",
    )
    target.add_argument(
        "--endpoint",
        choices=["chat", "completions"],
        default="chat",
        help="chat (default): /v1/chat/completions with the conversation; completions: /v1/completions with each "
        "turn's text as the prompt, as given (no chat template, no history: turns are independent)",
    )
    target.add_argument(
        "--extra-body",
        default=None,
        metavar="JSON",
        help="JSON object (or @FILE) merged into every request body, e.g. "
        """'{"chat_template_kwargs": {"thinking": false}, "top_p": 0.95}'; stored in the result""",
    )
    target.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="extra HTTP header on every request (repeatable); the value of a credential-like header "
        "(Authorization, Cookie, *key*, *token*, *secret*, *auth*) is never printed or stored",
    )
    target.add_argument(
        "--timeout",
        type=_bounded(float, 0.001, "--timeout"),
        default=600.0,
        help="per-request timeout, seconds (default %(default)s)",
    )

    load = parser.add_argument_group("load")
    load.add_argument(
        "--sessions",
        type=_positive_int_list,
        default=None,
        help="concurrent sessions; a comma list sweeps levels, e.g. 8,16,32 (default 8)",
    )
    load.add_argument(
        "--turns-per-session",
        type=_bounded(int, 1, "--turns-per-session"),
        default=5,
        help="turns per conversation (default %(default)s)",
    )
    load.add_argument(
        "--max-tokens",
        type=_bounded(int, 1, "--max-tokens"),
        default=512,
        help="max_tokens per reply (default %(default)s)",
    )
    load.add_argument(
        "--temperature",
        type=_bounded(float, 0.0, "--temperature"),
        default=0.0,
        help="always sent (default %(default)s)",
    )
    load.add_argument(
        "--ignore-eos", action="store_true", help="send ignore_eos (vLLM): every reply runs to --max-tokens"
    )
    load.add_argument(
        "--dataset",
        default=BUILTIN,
        help="'builtin' (225 prompts shipped with the tool) or a JSONL file of {\"prompt\": ...} lines",
    )
    load.add_argument(
        "--dataset-format",
        choices=list(datasets.FORMATS),
        default=None,
        help='format of --dataset (default: detected from its first record): prompts ({"prompt": ...}), '
        'openai-messages ({"messages": [...]}), sharegpt ({"conversations": [...]}), speed-bench '
        '({"category": ..., "turns": [...]}); conversations replay their user turns, the server '
        "generates the replies",
    )
    load.add_argument(
        "--shared-prefix-tokens",
        type=_bounded(int, 0, "--shared-prefix-tokens"),
        default=0,
        metavar="N",
        help="open every conversation with the same system text of about N tokens (estimated at 4 characters per "
        "token, no tokenizer; usage.prompt_tokens shows the real count). 0: none (default)",
    )
    load.add_argument(
        "--system-prompt", default=None, help="optional system message at the start of every conversation"
    )
    load.add_argument(
        "--warmup",
        type=_bounded(int, 0, "--warmup"),
        default=None,
        help="warmup requests before measuring (default: the first level's session count)",
    )
    load.add_argument(
        "--repeats",
        type=_bounded(int, 1, "--repeats"),
        default=1,
        help="measured repeats per level, fresh prompts each (default %(default)s)",
    )
    load.add_argument(
        "--prompt-order",
        choices=["random", "sequential"],
        default="random",
        help="random (default): each session draws its prompts by --seed; sequential: turn t of session s sends "
        "prompt (t x sessions + s) of the dataset, in file order (what `vllm bench serve --disable-shuffle` does)",
    )
    load.add_argument(
        "--seed",
        type=int,
        default=0,
        help="prompt selection seed; same seed = same conversations (default %(default)s)",
    )
    load.add_argument(
        "--independent-turns",
        action="store_true",
        help="send every turn without the conversation so far: the closed-loop load of "
        "`vllm bench serve --max-concurrency N`, for cross-checking against it",
    )
    load.add_argument(
        "--no-stream", action="store_true", help="non-streaming requests (no TTFT/TPOT; E2EL and tok/s only)"
    )

    out = parser.add_argument_group("output")
    out.add_argument(
        "--output",
        default=None,
        help="result JSON (default results/benchmark-<UTC time>.json); written atomically after every level. An "
        "existing result is kept until this run has measured a level (until then: OUTPUT.partial), then moved to "
        "<name>.previous.json; a FIFO, device or symbolic link is refused (/dev/null: keep nothing)",
    )
    out.add_argument("--label", default=None, help="free text stored in the result, e.g. dflash-st2 or baseline")
    out.add_argument(
        "--record-requests", action="store_true", help="also store every request's raw timestamps in the result"
    )
    out.add_argument(
        "--progress-interval",
        type=_bounded(float, 0.0, "--progress-interval"),
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help="during a level, print requests done / total, tok/s so far and time elapsed to stderr this often "
        "(default %(default)s; 0 turns it off)",
    )
    out.add_argument("--no-uvloop", action="store_true", help="use asyncio's loop even if uvloop is installed")
    cli_options.add_open_loop_args(parser)
    cli_options.add_analysis_args(parser)
    return parser


def _settings(args: argparse.Namespace, metrics_url: str | None, dataset: Dataset) -> Settings:
    return Settings(
        base_url=args.base_url,
        model=args.model,
        sessions=list(args.sessions) if args.request_rate is None else [],
        turns_per_session=args.turns_per_session,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        ignore_eos=args.ignore_eos,
        stream=not args.no_stream,
        independent_turns=args.independent_turns,
        prompt_order=args.prompt_order,
        dataset=dataset.describe(),
        system_prompt=args.system_prompt,
        warmup=args.warmup,
        repeats=args.repeats,
        seed=args.seed,
        timeout_s=args.timeout,
        metrics_url=redaction.redact_query(metrics_url) if metrics_url else None,
        api_key_set=bool(args.api_key),
        open_loop=cli_options.open_loop_settings(cli_options.open_loop_config(args)),
        slo=args.slo,
        percentiles=list(args.percentiles) if args.percentiles else None,
        endpoint=args.endpoint,
        extra_body=args.extra_body_dict,
        headers=[request_shaping.shown_header(n, v) for n, v in args.header_pairs] or None,
        shared_prefix_tokens=args.shared_prefix_tokens or None,
    )


def _connections(levels: tuple[int, ...], open_loop: OpenLoopConfig | None) -> tuple[int, str]:
    """The most connections the run holds at once (one per session in flight; warmup uses at most the first
    level's), and the options that ask for them, for messages."""
    most, what = max(levels), f"--sessions {max(levels)}"
    if open_loop is not None:
        in_flight = min(open_loop.sessions, open_loop.max_concurrency or open_loop.sessions)
        if in_flight > most:
            cap = f" (--max-concurrency {open_loop.max_concurrency})" if open_loop.max_concurrency else ""
            most, what = in_flight, f"--num-sessions {open_loop.sessions}{cap}"
    return most, what


def _system_prompt(args: argparse.Namespace, dataset: Dataset) -> str | None:
    """--system-prompt, after the shared prefix when --shared-prefix-tokens asks for one."""
    if not args.shared_prefix_tokens:
        return args.system_prompt
    vocabulary = [w for p in dataset.prompts for w in p.text.split()] or ["token"]
    prefix = datasets.shared_prefix(args.shared_prefix_tokens, args.seed, vocabulary)
    return prefix + ("\n\n" + args.system_prompt if args.system_prompt else "")


class ResultWriter:
    """Keeps the document current on disk and prints each finished level once. Where it writes, and why an
    earlier result is never lost: bench/output_file.py."""

    def __init__(self, path: Path, tool: ToolInfo, run: RunInfo, settings: Settings) -> None:
        self.file = ResultFile(path)
        self.path = self.file.path
        self.tool = tool
        self.run = run
        self.settings = settings
        self.printed = 0
        self.csv_percentiles: tuple[str, ...] | None = None  # --csv: the extra percentile columns
        self.saved_levels = 0  # levels in the document on disk
        self.write_error: OutputWriteError | None = None

    @property
    def written(self) -> bool:
        return self.file.written is not None

    @property
    def location(self) -> Path | None:
        """Where this run's latest document is (None: nothing written, or --output /dev/null)."""
        return self.file.written

    def document(self, state: RunState, levels: int | None = None) -> BenchmarkResult:
        settings = dataclasses.replace(self.settings, model=state.model or self.settings.model)
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
        self.file.write(report.to_json_text(document), has_levels=bool(document.results))
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
            if self.csv_percentiles is not None and state.results and self.location is not None:
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
            self.run, status=status, status_detail=detail or None, finished_at=report.utc_now(), exit_code=exit_code
        )
        document = self.document(state)
        if self.write_error is not None:
            # Best effort: the levels already on disk with a status that says what happened (a smaller or
            # equal document; if even that does not fit, the file keeps saying "running").
            try:
                self._write(self.document(state, levels=self.saved_levels))
            except OutputWriteError:
                print(f"note: could not record the failure in {self.path}; it still says 'running'", file=sys.stderr)
        elif self.written or state.results:
            self.checkpoint(state)
        return document


async def _run(cfg: RunConfig, writer: ResultWriter) -> int:
    stopper = Stopper()
    loop = asyncio.get_running_loop()

    def on_signal(name: str, code: int) -> None:
        if stopper.stopped:  # second signal: the user means it; checkpoints on disk are complete files
            print(f"\n{name} again: exiting now", file=sys.stderr)
            os._exit(code)
        print(f"\n{name}: stopping; finished requests are kept and written to {writer.path}", file=sys.stderr)
        stopper.trigger("interrupted", name, code)

    for signum, name, code in ((signal.SIGINT, "SIGINT", 130), (signal.SIGTERM, "SIGTERM", 143)):
        try:
            loop.add_signal_handler(signum, on_signal, name, code)
        except (NotImplementedError, RuntimeError):  # not on this platform: Ctrl-C then ends the run hard
            pass

    bench = Benchmark(cfg, stopper, writer.checkpoint)
    try:
        state = await bench.run()
    except UserError as exc:
        try:
            writer.finish(bench.state, "failed", str(exc), exc.exit_code)
        except OutputWriteError as write_error:
            print(f"error: {write_error}", file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        _say_where(writer)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a bug must not lose the results so far: written, then shown
        detail = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
        try:
            writer.finish(bench.state, "crashed", detail, 1)
        except OutputWriteError as write_error:
            print(f"error: {write_error}", file=sys.stderr)
        print(f"benchmark crashed ({detail})", file=sys.stderr)
        _say_where(writer)
        return 1
    try:
        document = writer.finish(state, stopper.status, stopper.detail, stopper.exit_code)
    except OutputWriteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    report.print_summary(document, sys.stdout)
    _say_where(writer)
    return stopper.exit_code


def _say_where(writer: ResultWriter) -> None:
    """Where this run's document is, only when it really is there (never a false "results are in X")."""
    if writer.location is None:
        return
    if writer.location == writer.file.partial:
        print(
            f"the earlier result in {writer.path} was kept (this run measured no level); this run's record is in "
            f"{writer.location}",
            file=sys.stderr,
        )
    else:
        backup = f" (the earlier result is now {writer.file.backup})" if writer.file.replaced else ""
        print(f"result written to {writer.location}{backup}", file=sys.stderr)


def _check_text_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse an argument that cannot be sent or stored as UTF-8 (non-UTF-8 bytes from the shell arrive as lone
    surrogates); its value is not echoed (it may be a key)."""
    for name, value in vars(args).items():
        for text in value if isinstance(value, list | tuple) else (value,):
            if isinstance(text, str) and unencodable_at(text) is not None:
                parser.error(
                    f"--{name.replace('_', '-')} holds bytes that are not UTF-8 (at character "
                    f"{unencodable_at(text)}); pass it as UTF-8 text"
                )


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    _check_text_args(args, parser)
    cli_options.check(args, parser)
    open_loop = cli_options.open_loop_config(args)
    if args.sessions is None:
        args.sessions = (8,) if open_loop is None else (min(8, open_loop.sessions),)
    args.api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or os.environ.get("VLLM_API_KEY") or None
    for flag, url in (("--base-url", args.base_url), ("--metrics-url", args.metrics_url)):
        if url and redaction.redact_url(url) != url:
            shown = redaction.redact_query(redaction.redact_url(url))
            parser.error(
                f"{flag} {shown!r} carries credentials (user:password@); vLLM takes a bearer key: pass it with "
                "--api-key or OPENAI_API_KEY"
            )
    base_url = normalize_base_url(args.base_url)
    if not base_url.startswith(("http://", "https://")):
        parser.error(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    if args.metrics_url is None:
        metrics_url: str | None = f"{base_url}/metrics"
    elif args.metrics_url.lower() == "none":
        metrics_url = None
    else:
        metrics_url = args.metrics_url
    if args.endpoint == "completions":
        if args.system_prompt or args.shared_prefix_tokens:
            parser.error(
                "--system-prompt and --shared-prefix-tokens need --endpoint chat "
                "(completions send the turn's text as the prompt)"
            )
        args.independent_turns = True  # a completion carries no conversation: say so in the result
    warmup = args.sessions[0] if args.warmup is None else args.warmup
    args.warmup = warmup
    try:
        dataset = load_dataset(args.dataset, args.dataset_format)
        args.extra_body_dict = request_shaping.parse_extra_body(args.extra_body) if args.extra_body else None
        args.header_pairs = [request_shaping.parse_header(h) for h in args.header]
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code

    cfg = RunConfig(
        endpoint=Endpoint(
            base_url=base_url,
            api_key=args.api_key,
            timeout_s=args.timeout,
            api=args.endpoint,
            extra_headers=tuple(args.header_pairs),
        ),
        model=args.model,
        levels=args.sessions,
        turns=args.turns_per_session,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        dataset=dataset,
        warmup=warmup,
        repeats=args.repeats,
        seed=args.seed,
        stream=not args.no_stream,
        ignore_eos=args.ignore_eos,
        metrics_url=metrics_url,
        system_prompt=_system_prompt(args, dataset),
        keep_records=args.record_requests,
        independent_turns=args.independent_turns,
        prompt_order=args.prompt_order,
        progress_interval_s=args.progress_interval,
        open_loop=open_loop,
        analyses=cli_options.analyses(args),
        keep_level_records=args.csv,
        extra_body=args.extra_body_dict,
    )
    started = report.utc_now()
    default_output = Path("results") / f"benchmark-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    output = Path(args.output) if args.output else default_output
    event_loop = eventloop.loop_name(prefer_uvloop=not args.no_uvloop)
    run_meta = RunInfo(
        label=args.label,
        started_at=started,
        status="running",
        command_line=report.redact_argv([sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
    )
    writer = ResultWriter(output, report.tool_info(event_loop), run_meta, _settings(args, metrics_url, dataset))
    if args.csv:
        writer.csv_percentiles = tuple(percentile_key(q) for q in args.percentiles or ())
    try:
        writer.file.check(export_csv.paths_for(writer.path) if args.csv else ())
        note = descriptors.ensure(*_connections(args.sessions, open_loop))
        if note:
            print(note, file=sys.stderr)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return eventloop.run(_run(cfg, writer), prefer_uvloop=not args.no_uvloop)


if __name__ == "__main__":
    sys.exit(main())
