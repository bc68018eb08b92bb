"""`qualify CONFIG --write-config TUNED.env`: a config that EXTENDS CONFIG with what the run chose (the drafter RoPE
amplitude, the depth schedule, the MLA backend), each line under a comment with its evidence: the figure, its interval,
the file it comes from. Nothing else is written: EXTENDS brings in the rest, API_KEY included (never copied here)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from kimi_dflash.config.loader import display_path
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.formatting import number, ratio
from kimi_dflash.qualify.amplitude import DOCUMENT as AMPLITUDE
from kimi_dflash.qualify.context import Context
from kimi_dflash.qualify.depths import AITER_KEY, SCHEDULE_KEY, shown
from kimi_dflash.qualify.depths import DOCUMENT as SCHEDULE
from kimi_dflash.qualify.documents import Amplitude, Schedule
from kimi_dflash.qualify.plan import SPEC_TOKENS
from kimi_dflash.rules.rope_amplitude import CHOICE_KEY


def check_target(target: Path, config: Path, shootout: bool) -> None:
    """Before the run: a file the run can write, and not CONFIG (it EXTENDS CONFIG)."""
    if shootout:
        raise UserError("--write-config concerns one config: qualify that config alone (without --candidates).")
    if target.resolve() == config.resolve():
        raise UserError(f"--write-config {target}: that is CONFIG itself; name another file (it EXTENDS CONFIG).")
    if not target.parent.is_dir() or target.is_dir():
        where = f"{target} is a directory" if target.is_dir() else f"no directory {target.parent}"
        raise UserError(f"--write-config {target}: {where}; name a file in an existing directory.")


def amplitude_lines(document: Amplitude | None, out: str) -> list[str]:
    if document is None or document.value is None:
        why = document.why if document else "the amplitude step did not measure it (see the report)"
        return [f"# {CHOICE_KEY}: not chosen by this run ({why}); the config's own stands."]
    best = next(s for s in document.sides if s.choice == document.recommended)
    others = [s for s in document.sides if s is not best]
    figures = [f"{s.choice} ({s.amplitude:g}) {shown(s.tau, lambda v: number(v, 2), 2)}" for s in (best, *others)]
    files = [f"{out}/{s.verdict_file} ({s.lossless})" for s in document.sides]
    results = [f"{out}/{s.result}" for s in document.sides if s.result]
    return [
        f"# {CHOICE_KEY}: {document.why}. Tokens per verify step (95 % interval over repeats, {document.sessions}"
        f" sessions): {'; '.join(figures)}. Token identity: {', '.join(files)}. Results: {', '.join(results)}.",
        f"{CHOICE_KEY}={document.value}",
    ]


def schedule_lines(document: Schedule | None, out: str, own_k: int) -> list[str]:
    if document is None or document.spec_tokens is None:
        why = document.why if document else "the schedule step did not run (see the report)"
        return [f"# Depth: not chosen by this run ({why}); the config's {SPEC_TOKENS} stands."]
    chosen = ", ".join(
        f"{c.sessions} sessions k={c.k}" + (f" (beat k={c.over} by {shown(c.ratio, ratio, 2)})" if c.over else "")
        for c in document.choices
    )
    head = [f"# Depth by load from the grid ({out}/{SCHEDULE}): {chosen}.", *(f"# {n}." for n in document.notes)]
    if document.schedule is None:
        if document.spec_tokens == own_k:
            return [*head, f"# The config's {SPEC_TOKENS}={own_k} is that depth."]
        return [*head, f"{SPEC_TOKENS}={document.spec_tokens}"]
    versus = ", ".join(f"{r.sessions}: {shown(r.vs_best, ratio, 2)} (k={r.best_k})" for r in document.rows)
    served = f"# Served: token identity {document.lossless} ({out}/lossless/verdict-schedule.json)"
    if document.lossless != "PASS":
        return [*head, f"{served}: not written; the config's {SPEC_TOKENS} stands."]
    lines = [*head, f"{served}; over the best fixed k by sessions {versus}; result {out}/{document.result}."]
    lines += [f"{SPEC_TOKENS}={document.spec_tokens}", f"{SCHEDULE_KEY}={document.schedule}"]
    if document.backend:
        lines += [
            f"# MLA backend: {document.backend}, measured there by the schedule's server above.",
            f"{AITER_KEY}=false",
        ]
    return lines


def write(ctx: Context, target: Path) -> str:
    """TUNED.env written whole (core/atomic_write.py); returns what to say."""
    base = os.path.relpath(ctx.config, target.resolve().parent)
    out = display_path(ctx.out)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"# Tuned by `kimi-dflash qualify {ctx.config_as_given}` ({when}); the evidence: {out}/report.md.",
        "# Only what that run measured on this box is set here; EXTENDS brings in the rest of the config.",
        f"EXTENDS={base}",
        "",
        *amplitude_lines(Amplitude.load_or_none(ctx.out / AMPLITUDE), out),
        "",
        *schedule_lines(Schedule.load_or_none(ctx.out / SCHEDULE), out, ctx.plan.spec_tokens),
    ]
    write_text_atomic(target, "\n".join(lines) + "\n")
    chosen = [line for line in lines if line and not line.startswith("#") and not line.startswith("EXTENDS=")]
    return f"qualify: wrote {target} (EXTENDS {base}): {', '.join(chosen) or 'nothing chosen; see its comments'}"
