"""Command line for fabricating the demo models (python -m kimi_dflash.demo, payload/fabricate_demo_models.py)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.options import declare, option
from kimi_dflash.demo.bundle import ensure_demo_models
from kimi_dflash.demo.catalog import CHOICES, DEFAULT

DESCRIPTION = """\
Fabricate the CPU demo models: a target with a byte-level BPE tokenizer and chat template, and a DFlash
drafter built to agree with it, so vLLM's speculative decoding shows real, non-zero acceptance. Built
deterministically from files in this repository (same repository contents -> byte-identical files), cached,
and reused while the cached copy is complete and current; a partial or outdated copy is rebuilt.

models (--model, the FABRICATE_DEMO_MODELS config values):
""" + "".join(f"  {name:<10} {choice.summary}\n" for name, choice in CHOICES.items())

EPILOG = """\
examples:
  python -m kimi_dflash.demo                     build the miniature Kimi once, then print the cached paths
  python -m kimi_dflash.demo --model qwen3       the tiny Qwen3 demo instead
  python -m kimi_dflash.demo --root /tmp/demo    build somewhere else
  python -m kimi_dflash.demo --force --json      rebuild and print the result as JSON

serve the result on CPU: ./serve.sh configs/demo-cpu.env (docs/demo-models.md has the raw vLLM command)
"""


@dataclass(kw_only=True)
class DemoOptions:
    root: Path | None = option("where the models are kept (default: <cache>/demo; KIMI_DFLASH_CACHE moves <cache>)")
    model: str = option(f"which demo models (default: {DEFAULT})", choices=sorted(CHOICES), default=DEFAULT)
    force: bool = option("rebuild even if a valid cached copy exists")
    json: bool = option("print paths and facts as one JSON object on stdout")


add_cli_args = declare(DemoOptions, DESCRIPTION, EPILOG)


def main(args: DemoOptions) -> int:
    def progress(message: str) -> None:
        print(f"demo: {message}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    try:
        models = ensure_demo_models(args.root, force=args.force, progress=progress, choice=args.model)
    except OSError as error:
        progress(f"cannot write the demo models: {error}. Pick a writable --root or set KIMI_DFLASH_CACHE.")
        return 1
    elapsed = time.perf_counter() - started
    summary = models.manifest().get("summary", {})
    if args.json:
        facts = {
            "model": models.choice.name,
            "architecture": models.choice.architecture,
            "target_dir": str(models.target_dir),
            "drafter_dir": str(models.drafter_dir),
            "built": models.built,
            "seconds": round(elapsed, 3),
            "recommended_num_speculative_tokens": models.choice.recommended_num_speculative_tokens,
            "summary": summary,
        }
        print(json.dumps(facts, indent=2))
        return 0
    progress(f"{'built' if models.built else 'reused cached copy'} in {elapsed:.2f} s")
    print(f"target:  {models.target_dir}")
    print(f"drafter: {models.drafter_dir}")
    if summary:
        profile = ", ".join(f"{100 * a:.0f}%" for a in summary.get("expected_acceptance_per_position", []))
        print(f"expected acceptance per draft position (greedy): {profile}")
    return 0
