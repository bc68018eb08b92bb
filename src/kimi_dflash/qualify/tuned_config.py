"""`qualify CONFIG --write-config TUNED.env`: EXTENDS CONFIG with what the run chose, each line under its evidence;
in a shoot-out, EXTENDS the winner's config (ranked first) with what its own steps chose. Nothing else is written:
EXTENDS brings in the rest, API_KEY included (never copied here)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from textwrap import TextWrapper

from kimi_dflash.config.loader import display_path
from kimi_dflash.config.schema import KEY
from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.formatting import ratio
from kimi_dflash.qualify.amplitude import DOCUMENT as AMPLITUDE
from kimi_dflash.qualify.context import Context
from kimi_dflash.qualify.depths import DOCUMENT as SCHEDULE
from kimi_dflash.qualify.documents import Amplitude, Schedule, Shootout, shown

COMMENT = TextWrapper(116, initial_indent="# ", subsequent_indent="# ", break_long_words=False, break_on_hyphens=False)


def check_target(target: Path, config: Path, candidates: Sequence[Path] = ()) -> None:
    """Before the run: a file the run can write, and neither CONFIG nor a candidate's (it EXTENDS one of them)."""
    for given, what in ((config, "CONFIG itself"), *((c, f"the candidate {c.name}") for c in candidates)):
        if target.resolve() == given.resolve():
            raise UserError(f"--write-config {target}: that is {what}; name another file (it EXTENDS that config).")
    if not target.parent.is_dir() or target.is_dir():
        where = f"{target} is a directory" if target.is_dir() else f"no directory {target.parent}"
        raise UserError(f"--write-config {target}: {where}; name a file in an existing directory.")


Lines = tuple[str, list[str]]  # a comment (its evidence), then the KEY=VALUE lines it explains


def amplitude_lines(document: Amplitude | None, out: str, why_not: str = "") -> Lines:
    if document is None or document.value is None:
        return f"{KEY.DRAFTER_ROPE_AMPLITUDE}: not chosen by this run ({document.why if document else why_not}).", []
    ordered = sorted(document.sides, key=lambda s: s.choice != document.recommended)
    figures = "; ".join(f"{s.choice} ({s.amplitude:g}) {shown(s.tau)}" for s in ordered)
    verdicts = ", ".join(f"{out}/{s.verdict_file} ({s.lossless})" for s in ordered)
    results = ", ".join(f"{out}/{s.result}" for s in ordered if s.result)
    tau = f"Tokens per verify step over repeats at {document.sessions} sessions (95 % interval)"
    why = f"{document.why}. {tau}: {figures}. Token identity: {verdicts}. Results: {results}."
    return f"{KEY.DRAFTER_ROPE_AMPLITUDE}: {why}", [f"{KEY.DRAFTER_ROPE_AMPLITUDE}={document.value}"]


def schedule_lines(document: Schedule | None, out: str, own_k: int, why_not: str = "") -> Lines:
    if document is None or document.spec_tokens is None:
        return f"Depth: not chosen by this run ({document.why if document else why_not}).", []
    chosen = ", ".join(
        f"{c.sessions} sessions k={c.k}" + (f" (beat k={c.over} by {shown(c.ratio, ratio)})" if c.over else "")
        for c in document.choices
    )
    head = " ".join([f"Depth by load from the grid ({out}/{SCHEDULE}): {chosen}.", *(f"{n}." for n in document.notes)])
    if document.schedule is None:
        return head, [] if document.spec_tokens == own_k else [f"{KEY.NUM_SPECULATIVE_TOKENS}={document.spec_tokens}"]
    served = f"Served: token identity {document.lossless} ({out}/lossless/verdict-schedule.json)"
    if document.lossless != "PASS":
        return f"{head} {served}: not written.", []
    versus = ", ".join(f"{r.sessions}: {shown(r.vs_best, ratio)} (k={r.best_k})" for r in document.rows)
    moved = f" Measured on {document.backend}." if document.backend else ""
    keys = [f"{KEY.NUM_SPECULATIVE_TOKENS}={document.spec_tokens}"]
    keys += [f"{KEY.NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE}={document.schedule}"]
    keys += [f"{KEY.ROCM_USE_AITER_MLA}=false"] if document.backend else []
    return f"{head} {served}; over the best fixed k by sessions {versus}; {out}/{document.result}.{moved}", keys


def _winner(ctx: Context) -> tuple[Context, str]:
    """The context whose choices are written, and a header naming it: CONFIG, or a shoot-out's first-ranked one."""
    head = f"Tuned by `kimi-dflash qualify {ctx.config_as_given}`"
    if not ctx.plan.candidates:
        return ctx, head
    ranking = Shootout.load_or_none(ctx.out / "shootout.json")
    first = next((row for row in ranking.rows if row.rank == 1), None) if ranking else None
    if first is None:
        raise UserError("no candidate was ranked (the report's Ranking says why): no drafter to write a config for")
    return ctx.candidate(first.candidate), f"{head} --candidates: {first.config} ranked first ({ranking.ranked_by})"


def write(ctx: Context, target: Path) -> str:
    """TUNED.env written whole (core/atomic_write.py); returns what to say."""
    won, head = _winner(ctx)
    config, here, out = won.config, target.resolve().parent, display_path(won.out)
    # Relative, so a checkout moves whole; absolute when the two share no directory but the root.
    base = os.path.relpath(config, here) if os.path.commonpath([config, here]) != "/" else str(config)
    why_not = {s.name: s.reason or "see the report's steps" for s in won.plan.steps}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    chosen = [
        (
            f"{head} ({when}); the evidence: {display_path(ctx.out)}/report.md. Only what that run measured on this "
            "box is set here; EXTENDS brings in the rest of the config.",
            [f"EXTENDS={base}"],
        ),
        amplitude_lines(Amplitude.load_or_none(won.out / AMPLITUDE), out, why_not["amplitude"]),
        schedule_lines(Schedule.load_or_none(won.out / SCHEDULE), out, won.plan.spec_tokens, why_not["schedule"]),
    ]
    lines: list[str] = []
    for why, keys in chosen:  # a path in a comment stays whole
        lines += ["", *COMMENT.wrap(why), *keys]
    write_text_atomic(target, "\n".join(lines[1:]) + "\n")
    values = [key for _, keys in chosen[1:] for key in keys]
    return f"qualify: wrote {target} (EXTENDS {base}): {', '.join(values) or 'nothing chosen (its comments say why)'}"
