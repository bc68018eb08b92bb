"""Cross-check: our benchmark and ``vllm bench serve`` on the same server with the same load.

Same load means N requests in flight (closed loop), the very same prompts (each round writes one prompt
file in both tools' formats; ours walks it with --prompt-order sequential, theirs with --disable-shuffle),
the same output length (ignore_eos), temperature 0, the chat endpoint. Our side runs with
--independent-turns (no history), the load shape of ``vllm bench serve --max-concurrency N``. (The prompts
matter: with speculative decoding the acceptance, and so the speed, depends on the text.) ``vllm bench serve``
runs in this process through the function its CLI calls (``vllm.benchmarks.serve.main``), so vLLM is imported
once; ours runs as a subprocess, exactly as a user runs it (its event-loop tuning never touches vLLM's runs).

Two modes:

* ``concurrent`` (default): both tools run at the same time, N sessions each and the same number of
  requests, so both see exactly the same server at the same moments; each measures its own share. On a
  shared machine whose speed swings from minute to minute this is the only fair pairing. Ours starts
  first; theirs starts the moment our measured window opens (its start-up is a fraction of a second).
* ``alternate``: theirs, ours, theirs, ours ... after one discarded priming run; the means are compared.
  The way a user would compare on a quiet, dedicated machine.

Usage: python -m kimi_dflash_lab.studies.crosscheck --base-url URL --model NAME --tokenizer DIR [--mode ...]
Needs vLLM installed (the dev venv); the benchmark itself does not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from kimi_dflash.bench.result import LevelResult, load_result
from kimi_dflash.bench.workload import BUILTIN, Dataset, load_dataset
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.envvars import HF_HUB_OFFLINE, VLLM_CACHE_ROOT
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.options import declare, option, run
from kimi_dflash.core.paths import cache_root

# Our benchmark as a user runs it (payload/benchmark_multi_turn.py calls the same main), in its own process.
BENCH_COMMAND = (sys.executable, "-m", "kimi_dflash.bench")


@dataclass(frozen=True)
class Load:
    """What both tools send."""

    base_url: str
    model: str
    concurrency: int
    requests: int  # measured requests per run; a multiple of concurrency (our sessions x turns)
    max_tokens: int
    warmup: int = 0

    @property
    def turns(self) -> int:
        if self.requests % self.concurrency:
            raise UserError("--requests must be a multiple of --concurrency (sessions x turns for our side)")
        return self.requests // self.concurrency


def round_prompts(count: int, seed: int, workdir: Path) -> tuple[Path, Path]:
    """``count`` prompts drawn from the built-in set, written as JSONL (ours) and ShareGPT (theirs), same order."""
    import random

    prompts = random.Random(f"crosscheck/{seed}").sample(load_dataset(BUILTIN).prompts, count)
    jsonl = workdir / f"prompts-{seed}.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"id": p.id, "prompt": p.text}, ensure_ascii=False) + "\n" for p in prompts),
        encoding="utf-8",
    )
    subset = Dataset(name=str(jsonl), prompts=tuple(prompts), sha256="")
    return jsonl, write_sharegpt(subset, workdir / f"prompts-{seed}.sharegpt.json")


def write_sharegpt(dataset: Dataset, path: Path) -> Path:
    """Our prompts in the ShareGPT layout ``vllm bench serve --dataset-name sharegpt`` reads."""
    items = [
        {"id": p.id, "conversations": [{"from": "human", "value": p.text}, {"from": "gpt", "value": "-"}]}
        for p in dataset.prompts
    ]
    path.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    return path


def ours_command(load: Load, output: Path, extra: Sequence[str] = ()) -> list[str]:
    return [
        *BENCH_COMMAND, "--base-url", load.base_url, "--model", load.model,
        "--sessions", str(load.concurrency), "--turns-per-session", str(load.turns), "--independent-turns",
        "--max-tokens", str(load.max_tokens), "--ignore-eos", "--temperature", "0", "--warmup", str(load.warmup),
        "--output", str(output), *extra,
    ]  # fmt: skip


def vllm_argv(load: Load, tokenizer: Path, sharegpt: Path, seed: int = 0) -> list[str]:
    """``--disable-shuffle``: the prompts are sent in file order, as ours with --prompt-order sequential."""
    return [
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", load.base_url,
        "--model", load.model, "--tokenizer", str(tokenizer),
        "--dataset-name", "sharegpt", "--dataset-path", str(sharegpt), "--sharegpt-output-len", str(load.max_tokens),
        "--num-prompts", str(load.requests), "--max-concurrency", str(load.concurrency), "--ignore-eos",
        "--temperature", "0", "--num-warmups", str(load.warmup), "--disable-tqdm", "--seed", str(seed),
        "--disable-shuffle",
    ]  # fmt: skip


def run_ours(load: Load, output: Path, timeout: float = 900, extra: Sequence[str] = ()) -> LevelResult:
    """Our benchmark as a subprocess; returns its single level result. RuntimeError carries its stderr."""
    proc = subprocess.run(
        ours_command(load, output, extra), capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark_multi_turn.py failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return load_result(output).results[0]


def vllm_bench_serve() -> Callable[[list[str]], dict[str, Any]]:
    """``vllm bench serve`` as a function of its argv (imports vLLM once)."""
    os.environ.setdefault(HF_HUB_OFFLINE, "1")
    os.environ.setdefault(VLLM_CACHE_ROOT, str(cache_root() / "vllm"))
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    import kimi_dflash.vllm_entry  # noqa: F401 - makes the CPU build report itself as vllm "+cpu"

    def run(argv: list[str]) -> dict[str, Any]:
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        return main(parser.parse_args(argv))

    return run


def agreement(ours: LevelResult, theirs: dict[str, Any]) -> dict[str, float | None]:
    """Our figures against vllm bench serve's (its result dict), as relative differences (ours / theirs - 1)."""

    def rel(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else a / b - 1.0

    return {
        "output_tok_s": rel(ours.output_tok_s, theirs.get("output_throughput")),
        "request_throughput": rel(ours.request_throughput, theirs.get("request_throughput")),
        "tpot_ms_mean": rel(ours.tpot_ms.mean, theirs.get("mean_tpot_ms")),
        "ttft_ms_mean": rel(ours.ttft_ms.mean, theirs.get("mean_ttft_ms")),
        "output_tokens": rel(ours.output_tokens, theirs.get("total_output_tokens")),
    }


def interleaved(
    load: Load, tokenizer: Path, rounds: int, workdir: Path, log: Callable[[str], None] = print, prime: int = 0
) -> dict[str, Any]:
    """``rounds`` alternating runs of each tool; the verdict compares the means of aggregate tok/s.

    One discarded run comes first: a CPU vLLM server keeps getting faster while it meets new batch
    shapes, and the first measured run must not pay for that.
    """
    theirs_fn = vllm_bench_serve()
    prime_load = dataclasses.replace(load, requests=prime or load.requests)
    primed = run_ours(prime_load, workdir / "prime.json", extra=["--seed", "1000"])
    log(f"prime run (discarded): {primed.output_tok_s:.2f} tok/s")
    runs: list[dict[str, Any]] = []
    for i in range(rounds):
        jsonl, sharegpt = round_prompts(load.requests, i, workdir)
        same_prompts = ["--dataset", str(jsonl), "--prompt-order", "sequential"]
        started = time.monotonic()
        theirs = theirs_fn(vllm_argv(load, tokenizer, sharegpt, seed=i))
        log(f"round {i + 1}: vllm bench serve {theirs['output_throughput']:.2f} tok/s ({theirs['completed']} ok, "
            f"{theirs['duration']:.1f} s window, {time.monotonic() - started:.0f} s wall)")  # fmt: skip
        started = time.monotonic()
        ours = run_ours(load, workdir / f"ours-{i + 1}.json", extra=same_prompts)
        log(f"round {i + 1}: benchmark_multi_turn {ours.output_tok_s:.2f} tok/s ({ours.completed} ok, "
            f"{ours.duration_s:.1f} s window, {time.monotonic() - started:.0f} s wall)")  # fmt: skip
        runs.append(_round(i, ours, theirs))
    return _verdict(load, runs, "alternate")


class _StartWatch(io.TextIOBase):
    """Stands in for stdout while vllm bench serve runs; notices when its measured run begins."""

    MARK = "Starting main benchmark run"

    def __init__(self, started: threading.Event, sink: TextIO) -> None:
        self.started, self.sink = started, sink

    def write(self, text: str) -> int:
        if self.MARK in text:
            self.started.set()
        return self.sink.write(text)

    def flush(self) -> None:
        self.sink.flush()


def _start_ours(
    load: Load, output: Path, extra: Sequence[str]
) -> tuple[subprocess.Popen[str], threading.Event, list[str]]:
    """Our benchmark in the background; the event fires when its measured window opens."""
    process = subprocess.Popen(
        ours_command(load, output, extra), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    measuring = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if "measuring" in line:
                measuring.set()
        measuring.set()  # ended (or died) without a window: do not leave the caller waiting

    threading.Thread(target=read, name="ours-stderr", daemon=True).start()
    return process, measuring, lines


def concurrent(
    load: Load, tokenizer: Path, rounds: int, workdir: Path, log: Callable[[str], None] = print, prime: int = 0
) -> dict[str, Any]:
    """``rounds`` runs where both tools load the server at the same time; compares their measured tok/s.

    Ours starts first and ``vllm bench serve`` is started the moment our measured window opens: its own
    start-up to its window is a fraction of a second, the smallest skew the two can get. (Started the
    other way round, our process start and server probe would fall inside its window, and the rounds
    disagreed by -14 % to +31 % on the dev box.)
    """
    theirs_fn = vllm_bench_serve()
    # Priming at the combined concurrency: a CPU vLLM server is slow the first time it meets a batch size.
    both = dataclasses.replace(load, concurrency=2 * load.concurrency, requests=prime or 2 * load.requests)
    primed = run_ours(both, workdir / "prime.json", extra=["--seed", "1000"])
    log(f"prime run at {both.concurrency} sessions (discarded): {primed.output_tok_s:.2f} tok/s")
    ours_load = dataclasses.replace(load, warmup=0)
    runs: list[dict[str, Any]] = []
    for i in range(rounds):
        jsonl, sharegpt = round_prompts(load.requests, i, workdir)
        same_prompts = ["--dataset", str(jsonl), "--prompt-order", "sequential"]
        their_start = threading.Event()
        box: dict[str, Any] = {}
        # No ready check and no warmup on their side: its measured run then starts within a second, and
        # the server is already warm from the priming run.
        argv = vllm_argv(ours_load, tokenizer, sharegpt, seed=i) + ["--ready-check-timeout-sec", "0"]

        def theirs_thread(argv: list[str], their_start: threading.Event, box: dict[str, Any]) -> None:
            try:
                with contextlib.redirect_stdout(_StartWatch(their_start, sys.stderr)):
                    box["result"] = theirs_fn(argv)
            except BaseException as exc:  # noqa: BLE001 - reported from the main thread
                box["error"] = exc
            finally:
                their_start.set()

        thread = threading.Thread(
            target=theirs_thread, args=(argv, their_start, box), name="vllm-bench-serve", daemon=True
        )
        output = workdir / f"ours-{i + 1}.json"
        process, measuring, lines = _start_ours(ours_load, output, same_prompts)
        measuring.wait(timeout=300)
        thread.start()
        code = process.wait(timeout=3600)
        thread.join(timeout=3600)
        if code != 0:
            raise RuntimeError(f"benchmark_multi_turn.py failed ({code}): {''.join(lines)[-3000:]}")
        if "error" in box or "result" not in box:
            raise RuntimeError(f"vllm bench serve failed: {box.get('error')!r}")
        ours, theirs = load_result(output).results[0], box["result"]
        log(f"round {i + 1} (both at once): vllm bench serve {theirs['output_throughput']:.2f} tok/s "
            f"({theirs['completed']} ok, {theirs['duration']:.1f} s), benchmark_multi_turn {ours.output_tok_s:.2f} "
            f"tok/s ({ours.completed} ok, {ours.duration_s:.1f} s)")  # fmt: skip
        runs.append(_round(i, ours, theirs))
    return _verdict(load, runs, "concurrent")


def _round(i: int, ours: LevelResult, theirs: dict[str, Any]) -> dict[str, Any]:
    return {
        "round": i + 1,
        "vllm_bench_serve": {k: theirs.get(k) for k in (
            "output_throughput", "request_throughput", "mean_ttft_ms", "mean_tpot_ms", "completed", "failed",
            "total_output_tokens", "duration")},
        "ours": {
            "output_tok_s": ours.output_tok_s, "request_throughput": ours.request_throughput,
            "completed": ours.completed, "failed": ours.failed, "output_tokens": ours.output_tokens,
            "duration_s": ours.duration_s, "mean_ttft_ms": ours.ttft_ms.mean, "mean_tpot_ms": ours.tpot_ms.mean,
        },
        "difference": agreement(ours, theirs),
    }  # fmt: skip


def _verdict(load: Load, runs: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """Each round is one paired measurement; the verdict is the mean of the per-round differences (a fast
    round must not outweigh a slow one just because the shared machine happened to be idle then)."""
    return {
        "mode": mode,
        "load": asdict(load),
        "rounds": runs,
        "ours_output_tok_s_mean": statistics.fmean(r["ours"]["output_tok_s"] for r in runs),
        "vllm_output_tok_s_mean": statistics.fmean(r["vllm_bench_serve"]["output_throughput"] for r in runs),
        "output_tok_s_difference": statistics.fmean(r["difference"]["output_tok_s"] for r in runs),
    }


@dataclass(kw_only=True)
class CrosscheckOptions:
    base_url: str = option(required=True)
    model: str = option(required=True)
    tokenizer: Path = option("tokenizer dir for vllm bench serve", required=True)
    concurrency: int = option(default=4)
    requests: int = option("per run; a multiple of --concurrency", default=16)
    max_tokens: int = option(default=32)
    warmup: int | None = option("warmup requests per run (default: --concurrency)")
    rounds: int = option(default=2)
    prime_requests: int = option(
        "requests of the discarded priming run, a multiple of its sessions (default 0: a round's, at the round's "
        "concurrency; twice both in concurrent mode)",
        default=0,
        minimum=0,
    )
    mode: str = option("concurrent: both tools at once, same load each (robust on a shared machine); alternate: one "
        "after the other (default %(default)s)", choices=["concurrent", "alternate"], default="concurrent"
    )  # fmt: skip
    output: Path | None = option("write the comparison as JSON here")


add_cli_args = declare(
    CrosscheckOptions,
    "Alternate vllm bench serve and benchmark_multi_turn.py on one server with the same load and compare aggregate "
    "output tok/s (means over the rounds).",
)


def main(args: CrosscheckOptions) -> int:
    warmup = args.concurrency if args.warmup is None else args.warmup
    try:
        load = Load(args.base_url.rstrip("/"), args.model, args.concurrency, args.requests, args.max_tokens, warmup)
        load.turns  # noqa: B018 - validates requests vs concurrency
        with tempfile.TemporaryDirectory(prefix="crosscheck-") as tmp:
            runner = concurrent if args.mode == "concurrent" else interleaved
            report = runner(
                load, args.tokenizer, args.rounds, Path(tmp), lambda m: print(m, flush=True), args.prime_requests
            )
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    per_round = ", ".join(f"{r['difference']['output_tok_s']:+.2%}" for r in report["rounds"])
    print(
        f"aggregate output tok/s, ours vs vllm bench serve: per round {per_round}; "
        f"mean difference {report['output_tok_s_difference']:+.2%}"
    )
    if args.output:
        write_text_atomic(args.output, json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab.studies.crosscheck"))
