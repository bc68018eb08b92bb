"""Fake qualify steps, for tests of what happens around the steps (the output directory, its lock, the state
file, the archive, stopping servers) without a preflight or a real server (a fixtures module: test files import
it, never each other).

Each fake writes ``fake-<step>.json`` through the context (so it is in the run's manifest); the fake candidate
also writes a passing lossless verdict, so a run of fakes exits 0. Run as a script it is qualify with every step
but those named faked: ``python qualify_fakes.py grid CONFIG --out DIR ...``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from kimi_dflash.qualify import steps
from kimi_dflash.qualify.state import DONE

PASSING_VERDICT = {"verdict": "PASS", "agreement": {"identical": 8, "prompts": 8}, "max_tokens": 48}


def fake_output(out: Path, step: str) -> Path:
    return out / f"fake-{step}.json"


def _fake(name: str) -> Callable[[steps.Context], steps.Outcome]:
    def step(ctx: steps.Context) -> steps.Outcome:
        ctx.write_json(fake_output(ctx.out, name), {"step": name})
        if name == "candidate":
            ctx.write_json(ctx.lossless_dir / "verdict.json", PASSING_VERDICT)
        return steps.Outcome(DONE, f"fake {name}")

    return step


def fakes(keep: Iterable[str] = ()) -> dict[str, Callable[[steps.Context], steps.Outcome]]:
    """A fake for every step but ``keep``."""
    return {name: _fake(name) for name in steps.STEPS if name not in set(keep)}


if __name__ == "__main__":
    from kimi_dflash.core import options

    steps.STEPS.update(fakes(sys.argv[1].split(",")))
    sys.exit(options.run("kimi_dflash.qualify.cli", sys.argv[2:]))
