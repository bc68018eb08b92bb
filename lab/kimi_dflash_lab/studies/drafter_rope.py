"""Which RoPE amplitude does a drafter serve best with? (issues 28 and 33, section 1)

Serves the miniature Kimi with each of the lab's two drafters (z-lab's YaRN rope fields; attention built for
amplitude 1.4159 or 1.0: kimi_dflash_lab.yarn_drafter, as MODEL_DIR / DRAFT_MODEL_DIR) on the vLLM installed here at
both amplitudes, one server at a time: DRAFTER_ROPE_AMPLITUDE=legacy (1.4159, the launcher's overlay) and engine
(what this vLLM gives: 1.0 from 0.30). Each is benchmarked with the same workload (payload/benchmark_multi_turn.py's
module, T=0, fixed seed); acceptance per draft position comes from vLLM's /metrics counter deltas. Writes every result
file, the serve.sh lines that say what the launcher did, and a summary (JSON + markdown).

  python benchmarks/drafter_rope.py --out benchmarks/results/drafter-rope
  python benchmarks/drafter_rope.py --out /tmp/rope --sessions 2 --max-tokens 64      # quicker

Exit 0 when every run completed and each drafter is accepted at least as often at every position with the
amplitude it is built for as with the other (and more in all), 1 otherwise.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kimi_dflash.core.atomic_write import write_json_atomic, write_text_atomic
from kimi_dflash.core.options import declare, option, run
from kimi_dflash.launch.serve_sh import free_port
from kimi_dflash_lab.yarn_drafter import DRAFTERS, LEGACY_DRAFTER, YarnDrafter, ensure_yarn_models

REPO = Path(__file__).resolve().parents[3]  # the checkout (a lab study runs from one)
CONFIG = "configs/demo-cpu.env"
# How the study serves the bundles (FABRICATE_DEMO_MODELS has no kimi-yarn choice), as its summary records it.
SERVED_AS = f"{CONFIG} serving the {' and '.join(DRAFTERS)} bundles (MODEL_DIR / DRAFT_MODEL_DIR)"
MODEL = "kimi-k26-dflash-demo"
CHOICES = ("legacy", "engine")  # 1.4159 (the launcher's overlay) and what vLLM 0.30+ gives, 1.0


@dataclass
class Run:
    variant: str  # "<bundle>-<choice>"
    drafter: str  # the bundle
    built_for: float
    drafter_rope_amplitude: str
    serve_lines: list[str] = field(default_factory=list)  # serve.sh's "drafter RoPE:" lines
    result: str | None = None  # the benchmark's result file (relative to the output directory)
    per_position: list[float] | None = None
    acceptance_length: float | None = None
    drafts: int | None = None
    output_tok_s: float | None = None
    error: str | None = None


def served_models(drafter: YarnDrafter = LEGACY_DRAFTER) -> dict[str, str]:
    """The environment that serves a yarn bundle (fabricated first when needed) from a demo config."""
    target_dir, drafter_dir = ensure_yarn_models(
        progress=lambda message: print(f"drafter-rope: {message}", file=sys.stderr), drafter=drafter
    )
    return {
        "FABRICATE_DEMO_MODELS": "none",
        "MODEL_DIR": str(target_dir),
        "DRAFT_MODEL_DIR": str(drafter_dir),
        "HF_HUB_OFFLINE": "1",  # what the plan sets for a demo choice: never wait on the hub
    }


def measure(drafter: YarnDrafter, choice: str, out: Path, args: Options) -> Run:
    run = Run(f"{drafter.bundle}-{choice}", drafter.bundle, drafter.built_for, choice)
    variant = run.variant
    port = free_port()
    env = {
        **os.environ,
        **served_models(drafter),
        "PORT": str(port),
        "DRAFTER_ROPE_AMPLITUDE": choice,
        "NUM_SPECULATIVE_TOKENS": str(args.num_speculative_tokens),
        "KIMI_PYTHON": sys.executable,
    }
    serve = [str(REPO / "serve.sh"), str(REPO / CONFIG)]
    started = subprocess.run([*serve, "--wait"], env=env, capture_output=True, text=True, timeout=900)
    run.serve_lines = [line for line in started.stderr.splitlines() if line.startswith("drafter RoPE:")]
    if started.returncode != 0:
        run.error = f"serve.sh exited {started.returncode}: {started.stderr.strip()[-800:]}"
        return run
    try:
        result = out / f"{variant}.json"
        bench = [
            sys.executable,
            "-m",
            "kimi_dflash.bench",
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--model",
            MODEL,
            "--sessions",
            str(args.sessions),
            "--turns-per-session",
            str(args.turns),
            "--max-tokens",
            str(args.max_tokens),
            "--ignore-eos",
            "--warmup",
            "2",
            "--seed",
            str(args.seed),
            "--label",
            f"{drafter.bundle} DRAFTER_ROPE_AMPLITUDE={choice}",
            "--output",
            str(result),
        ]
        done = subprocess.run(
            bench, env={**os.environ, "PYTHONPATH": str(REPO / "src")}, capture_output=True, text=True
        )
        if done.returncode != 0:
            run.error = f"benchmark exited {done.returncode}: {done.stderr.strip()[-800:]}"
            return run
        document = json.loads(result.read_text())
        level = document["results"][0]
        spec = level.get("spec_decode") or {}
        run.result = result.name
        run.per_position = spec.get("per_position")
        run.acceptance_length = spec.get("acceptance_length")
        run.drafts = spec.get("drafts")
        run.output_tok_s = level.get("output_tok_s")
    finally:
        subprocess.run([*serve, "--stop"], env=env, capture_output=True, text=True, timeout=180)
    return run


def verdict(runs: list[Run]) -> tuple[bool, list[str]]:
    """Each drafter at the amplitude it is built for >= the other at every position, and more in all; the table."""
    by = {(run.drafter, run.drafter_rope_amplitude): run.per_position for run in runs}
    ok, lines = True, ["| drafter (built for) | draft position | legacy (1.4159) | engine (1.0) |", "|---|---|---|---|"]
    for drafter in DRAFTERS.values():
        legacy, engine = by.get((drafter.bundle, "legacy")), by.get((drafter.bundle, "engine"))
        if legacy is None or engine is None:
            ok = False
            continue
        own, other = (legacy, engine) if drafter.built_for > 1 else (engine, legacy)
        ok = ok and all(a >= b for a, b in zip(own, other, strict=True)) and sum(own) > sum(other)
        lines += [
            f"| {drafter.bundle} ({drafter.built_for:.4f}) | {i} | {a:.1%} | {b:.1%} |"
            for i, (a, b) in enumerate(zip(legacy, engine, strict=True), 1)
        ]
    return ok, lines


@dataclass(kw_only=True)
class Options:
    out: Path = option("output directory", default=Path("drafter-rope"))
    sessions: int = option("concurrent sessions", default=4, minimum=1)
    turns: int = option("turns per session", default=2, minimum=1)
    max_tokens: int = option("tokens per reply", default=128, minimum=1)
    seed: int = option("prompt selection seed", default=1)
    num_speculative_tokens: int = option("drafted tokens per step", default=4, minimum=1)


add_cli_args = declare(Options, __doc__)


def main(args: Options) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for drafter in DRAFTERS.values():
        for choice in CHOICES:
            print(f"drafter-rope: {drafter.bundle} DRAFTER_ROPE_AMPLITUDE={choice} ...", file=sys.stderr, flush=True)
            run = measure(drafter, choice, out, args)
            print(f"  {run.serve_lines} per position {run.per_position} {run.error or ''}", file=sys.stderr, flush=True)
            runs.append(run)
    ok, table = verdict(runs) if all(r.error is None for r in runs) else (False, [])
    command = (
        f"python benchmarks/drafter_rope.py --out {out} --sessions {args.sessions} --turns {args.turns} "
        f"--max-tokens {args.max_tokens} --seed {args.seed} --num-speculative-tokens {args.num_speculative_tokens}"
    )
    summary = {
        "study": "drafter RoPE amplitude (issues 28 and 33)",
        "config": SERVED_AS,
        "command": command,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "load_average": os.getloadavg()},
        "each_drafter_best_at_its_own_amplitude": ok,
        "runs": [asdict(run) for run in runs],
    }
    write_json_atomic(out / "summary.json", summary)
    text = [
        "# Drafter RoPE amplitude on the CPU demo",
        "",
        "The miniature Kimi with each lab drafter (z-lab's YaRN rope fields, the same config.json; attention built "
        "for amplitude 1.4159 or 1.0), served on this vLLM with DRAFTER_ROPE_AMPLITUDE=legacy (1.4159, the "
        "launcher's overlay) and engine (1.0); acceptance per draft position from /metrics (T=0, the same prompts "
        "for all).",
        "",
        *table,
        "",
        *[f"- {run.variant}: {line}" for run in runs for line in run.serve_lines],
        "",
        f"Command: `{command}`",
        "",
    ]
    write_text_atomic(out / "summary.md", "\n".join(text))
    print("\n".join(table))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab drafter-rope"))
