"""In-band lossless evidence: did two runs serve the same replies to the same conversations? Matching
'repeat/session/k' keys are matched requests while the replies agree; only greedy decoding must give identical ones."""

from __future__ import annotations

from dataclasses import dataclass

from kimi_dflash.bench.result import BenchmarkResult, LevelResult
from kimi_dflash.core.formatting import MISSING, markdown_table, percent


@dataclass(frozen=True)
class ReplyMatch:
    sessions: int
    compared: int  # requests present (and successful) in both runs
    identical: int
    first_difference: str | None  # the key of the first differing reply ('repeat/session/k')

    @property
    def fraction(self) -> float | None:
        return self.identical / self.compared if self.compared else None


def match_level(a: LevelResult, b: LevelResult) -> ReplyMatch | None:
    """Replies of two levels compared key by key (None when either run stored no hashes)."""
    if not a.reply_hashes or not b.reply_hashes:
        return None
    common = sorted(set(a.reply_hashes) & set(b.reply_hashes), key=lambda key: [int(part) for part in key.split("/")])
    same = [k for k in common if a.reply_hashes[k] == b.reply_hashes[k]]
    differing = [k for k in common if a.reply_hashes[k] != b.reply_hashes[k]]
    return ReplyMatch(a.sessions, len(common), len(same), differing[0] if differing else None)


def greedy(document: BenchmarkResult) -> bool:
    return document.settings.temperature == 0


def markdown(baseline: BenchmarkResult, candidate: BenchmarkResult, names: tuple[str, str], common: list[int]) -> str:
    b_name, c_name = names
    rows = [f"## Served replies: {c_name} vs {b_name}", ""]
    if not (greedy(baseline) and greedy(candidate)):
        rows += ["Not compared: replies are identical only under greedy decoding (temperature 0).", ""]
        return "\n".join(rows)
    matches = [m for s in common if (m := match_level(baseline.levels[s], candidate.levels[s])) is not None]
    if not matches:
        rows += ["Not compared: a result file has no reply hashes (written before they were stored).", ""]
        return "\n".join(rows)
    header = ["sessions", "replies compared", "identical", "first difference (repeat/session/k)"]
    cells = [
        [m.sessions, m.compared, f"{m.identical} ({percent(m.fraction)})", m.first_difference or MISSING]
        for m in matches
    ]
    rows += markdown_table(header, "rrrl", cells)
    compared = sum(m.compared for m in matches)
    identical = sum(m.identical for m in matches)
    verdict = (
        f"At temperature 0 on matched conversations, **all {compared} served replies were identical** "
        "(sha256 of reasoning + content): the candidate's output equals the baseline's."
        if identical == compared
        else f"At temperature 0 on matched conversations, **{compared - identical} of {compared} replies differed**; "
        "after a first difference a session's later turns carry different histories. Greedy output is expected to "
        "match exactly for a lossless method in float32; bf16 near-ties can flip a token."
    )
    rows += ["", verdict, ""]
    return "\n".join(rows)
