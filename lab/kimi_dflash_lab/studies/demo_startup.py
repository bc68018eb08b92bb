"""Start-up time of the CPU demo, variants interleaved, and whether they answer the same tokens.

Each round starts every variant in turn (A, B, A, B, ...) with `serve.sh CONFIG --wait` on a free port, times the
command from its start to its return (preflight included) and takes serve.sh's own "ready after" (vLLM start to a
served one-token completion), reads where the time went from the server log's timestamps (1 s resolution), asks
the T=0 replies (token ids) of a few prompts, and stops it. One server at a time. Interleaving puts a drift in the
machine's load on every variant alike; the load average is recorded at each start.

  python benchmarks/demo_startup.py                          # before (vLLM's executor choice) vs after (the config)
  python benchmarks/demo_startup.py --rounds 3 --output /tmp/startup.json
  python benchmarks/demo_startup.py --variant mp:DISTRIBUTED_EXECUTOR_BACKEND=mp --variant config:

Exit 0 when every start served and all replies are token-identical across variants, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.options import declare, option, run
from kimi_dflash.launch.serve_sh import free_port

REPO = Path(__file__).resolve().parents[3]  # the checkout (a lab study runs from one)

PROMPTS = (
    "Hello",
    "Write a haiku about the sea.",
    "Explain speculative decoding in one paragraph.",
    "List three prime numbers and say why they are prime.",
)
DEFAULT_VARIANTS = ("before:DISTRIBUTED_EXECUTOR_BACKEND=auto", "after:")

# Milestones read from the log: (name, pattern of the first line that marks it).
MILESTONES = (
    ("API server imported vLLM", re.compile(r"^\(APIServer pid=\d+\)")),
    ("engine core imported vLLM", re.compile(r"^\(EngineCore[^ ]* pid=\d+\)")),
    ("worker imported vLLM", re.compile(r"^\((?:VllmWorker|Worker)[^ ]* pid=\d+\)")),
    ("model load starts", re.compile(r"Starting to load model")),
    ("engine initialised", re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    ("API server listening", re.compile(r"Starting vLLM server on")),
)
STAMP = re.compile(r" (?:INFO|WARNING|DEBUG|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d) ")
READY = re.compile(r"serve: ready after ([0-9.]+) s")


@dataclass
class Start:
    variant: str
    round: int
    wall_s: float | None  # serve.sh --wait, start to return (preflight included)
    ready_s: float | None  # serve.sh's "ready after": vLLM started to a served completion
    load_average: tuple[float, float, float]
    milestones: dict[str, float] = field(default_factory=dict)  # seconds after the serve.sh start
    replies: list[list[int]] = field(default_factory=list)
    processes: int = 0  # vLLM's processes (the server's session) once ready
    # CPU seconds (user + system) each vLLM process had used when ready, by process title: a measure of the work
    # that a loaded machine does not distort the way it distorts wall time.
    cpu_s: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def milestones(log_text: str, started_wall: float) -> dict[str, float]:
    """Seconds from ``started_wall`` (epoch) to the first log line of each milestone (log stamps have 1 s
    resolution and no year: the start's year is assumed)."""
    year = datetime.fromtimestamp(started_wall).year
    found: dict[str, float] = {}
    for line in log_text.splitlines():
        stamp = STAMP.search(line)
        if stamp is None:
            continue
        for name, pattern in MILESTONES:
            if name not in found and pattern.search(line):
                at = datetime.strptime(f"{year}-{stamp.group(1)}", "%Y-%m-%d %H:%M:%S").timestamp()
                found[name] = round(at - started_wall, 1)
    return found


def _replies(port: int, model: str, max_tokens: int) -> list[list[int]]:
    out = []
    for prompt in PROMPTS:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "return_token_ids": True,
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            out.append(list(json.loads(response.read())["choices"][0]["token_ids"]))
    return out


def _family_cpu(port: int) -> dict[str, float]:
    """CPU seconds of each process of the server on ``port`` (its ownership token names them), by title."""
    from kimi_dflash.core.paths import cache_root
    from kimi_dflash.launch import ownership

    record = json.loads((cache_root() / "run" / f"serve-{port}.pid").read_text())
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid in ownership.family(record["token"]):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        name = "API server" if pid == record["pid"] else title.rsplit("/", 1)[-1][:40]
        out[f"{name} ({pid})"] = round((int(fields[11]) + int(fields[12])) / ticks, 2)  # utime + stime
    return out


def run_start(config: Path, name: str, overrides: dict[str, str], round_: int, logs: Path, model: str,
              max_tokens: int) -> Start:  # fmt: skip
    port = free_port()
    env = {**os.environ, **overrides, "PORT": str(port), "KIMI_PYTHON": sys.executable}
    log = logs / f"{name}-{round_}.log"
    load = os.getloadavg()
    started_wall, started = time.time(), time.perf_counter()
    serve = [str(REPO / "serve.sh"), str(config)]
    process = subprocess.Popen(
        [*serve, "--wait", "--log", str(log)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    stderr, vllm_started = [], None
    for line in process.stderr:  # stamped as it comes: when serve.sh hands over to vLLM (preflight is done)
        stderr.append(line)
        if vllm_started is None and line.startswith("serve: vLLM pid"):
            vllm_started = round(time.perf_counter() - started, 1)
    code = process.wait()
    wall = time.perf_counter() - started
    text = "".join(stderr)
    ready = READY.search(text)
    start = Start(name, round_, round(wall, 2), float(ready.group(1)) if ready else None, load)
    try:
        if code != 0:
            start.error = f"serve.sh exited {code}: {text.strip()[-500:]}"
            return start
        start.cpu_s = _family_cpu(port)
        start.processes = len(start.cpu_s)
        start.replies = _replies(port, model, max_tokens)
    except (OSError, ValueError, KeyError) as error:
        start.error = f"{type(error).__name__}: {error}"
    finally:
        subprocess.run([*serve, "--stop"], env=env, capture_output=True, text=True, timeout=180)
        start.milestones = milestones(log.read_text(errors="replace") if log.exists() else "", started_wall)
        if vllm_started is not None:
            start.milestones = {"preflight done, vLLM started": vllm_started, **start.milestones}
    return start


def _variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition(":")
    overrides = dict(item.split("=", 1) for item in rest.split(",") if item.strip())
    if not name:
        raise ValueError(f"--variant {text!r}: NAME:KEY=VALUE[,KEY=VALUE] (NAME: for none)")
    return name, overrides


def summary(starts: list[Start]) -> tuple[list[str], bool]:
    lines, ok = [], all(s.error is None for s in starts)
    names = list(dict.fromkeys(s.variant for s in starts))
    for name in names:
        mine = [s for s in starts if s.variant == name]
        walls = [s.wall_s for s in mine if s.wall_s is not None and s.error is None]
        readies = [s.ready_s for s in mine if s.ready_s is not None]
        lines.append(
            f"{name:<8} processes {sorted({s.processes for s in mine})}  "
            f"wall (serve.sh --wait) {walls} median {statistics.median(walls) if walls else '-'} s  "
            f"ready {readies} median {statistics.median(readies) if readies else '-'} s"
        )
        for milestone in ["preflight done, vLLM started", *(m for m, _ in MILESTONES)]:
            values = [s.milestones[milestone] for s in mine if milestone in s.milestones]
            if values:
                lines.append(f"    {milestone:<30} median {statistics.median(values):5.1f} s  {values}")
        cpu = [sum(s.cpu_s.values()) for s in mine if s.cpu_s]
        if cpu:
            lines.append(f"    CPU s of vLLM's processes at ready: median {statistics.median(cpu):.1f}  {cpu}")
            for s in mine:
                lines.append(f"      {s.variant}{s.round}: " + ", ".join(f"{k} {v}" for k, v in s.cpu_s.items()))
    replies = {json.dumps(s.replies) for s in starts if s.error is None}
    identical = len(replies) == 1
    lines.append(f"T=0 replies ({len(PROMPTS)} prompts) token-identical across all starts: {identical}")
    lines.append("load average at each start: " + ", ".join(f"{s.variant}{s.round} {s.load_average[0]:.2f}"
                                                              for s in starts))  # fmt: skip
    return lines, ok and identical


@dataclass(kw_only=True)
class StartupOptions:
    config: Path = option(default=REPO / "configs" / "demo-cpu.env")
    variant: list[tuple[str, dict[str, str]]] = option("NAME:KEY=VALUE[,KEY=VALUE] (repeat)", repeatable=True,
        parse=_variant)  # fmt: skip
    rounds: int = option(default=3)
    max_tokens: int = option(default=48)
    logs: Path = option(default=Path("/tmp/demo-startup-logs"))
    output: Path | None = option("write every start as JSON here")


add_cli_args = declare(StartupOptions, __doc__)


def main(args: StartupOptions) -> int:
    from kimi_dflash.config.validate import load_config

    variants = args.variant or [_variant(v) for v in DEFAULT_VARIANTS]
    model = str(load_config(args.config, environ={})["SERVED_MODEL_NAME"])
    args.logs.mkdir(parents=True, exist_ok=True)
    starts = []
    for round_ in range(1, args.rounds + 1):
        for name, overrides in variants:
            start = run_start(args.config, name, overrides, round_, args.logs, model, args.max_tokens)
            print(f"{name} #{round_}: wall {start.wall_s} s, ready {start.ready_s} s, load {start.load_average[0]:.2f}"
                  f"{'' if start.error is None else ', ' + start.error}", file=sys.stderr, flush=True)  # fmt: skip
            starts.append(start)
    lines, ok = summary(starts)
    print("\n".join(lines))
    if args.output:
        write_text_atomic(args.output, json.dumps([asdict(s) for s in starts], indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run(__name__, prog="demo_startup.py"))
