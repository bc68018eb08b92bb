"""A level's per-request acceptance table and reply hashes, from its records (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise, zip_longest
from typing import Any

from kimi_dflash.bench.columns import SPEC_GROUPS, stdout_table
from kimi_dflash.bench.metrics import summarize
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.result import SpecGroup, SpecPerRequest
from kimi_dflash.bench.spec_request import RequestSpec

# Prompt-length buckets (usage.prompt_tokens): acceptance collapses at long context on real deployments.
PROMPT_BUCKET_EDGES = (0, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def prompt_bucket(prompt_tokens: int | None) -> tuple[int, str]:
    """(sort order, label) of a prompt length's bucket, e.g. (512, "512-1023"); "unknown" (last) without usage."""
    if prompt_tokens is None:
        return 1 << 62, "unknown"
    for low, high in pairwise(PROMPT_BUCKET_EDGES):
        if prompt_tokens < high:
            return low, f"{low}-{high - 1}"
    return PROMPT_BUCKET_EDGES[-1], f">={PROMPT_BUCKET_EDGES[-1]}"


def group_row(key: str, specs: Sequence[RequestSpec]) -> SpecGroup:
    """Pooled sums and per-request distributions of a group (definitions: spec_request)."""
    steps = sum(s.num_spec_steps for s in specs)
    accepted = sum(s.num_accepted_draft_tokens for s in specs)
    drafted = sum(s.num_draft_tokens for s in specs)
    stepped = [s for s in specs if s.num_spec_steps > 0]
    return SpecGroup(
        key=key,
        requests=len(specs),
        spec_steps=steps,
        accepted_tokens=accepted,
        draft_tokens=drafted,
        acceptance_length=1.0 + accepted / steps if steps else None,
        acceptance_rate=accepted / drafted if drafted else None,
        acceptance_length_dist=summarize([1.0 + s.num_accepted_draft_tokens / s.num_spec_steps for s in stepped]),
        acceptance_rate_dist=summarize(
            [s.num_accepted_draft_tokens / s.num_draft_tokens for s in stepped if s.num_draft_tokens > 0]
        ),
    )


def _rows(keyed: Sequence[tuple[Any, str, RequestSpec]]) -> list[SpecGroup]:
    grouped: dict[tuple[Any, str], list[RequestSpec]] = {}
    for order, label, spec in keyed:
        grouped.setdefault((order, label), []).append(spec)
    return [group_row(label, specs) for (_, label), specs in sorted(grouped.items(), key=lambda item: item[0])]


def spec_per_request(records: Sequence[RequestRecord]) -> SpecPerRequest | None:
    """The level's per-request acceptance (None when no successful request carried the statistics)."""
    ok = [r for r in records if r.ok]
    carried = [(r, r.spec) for r in ok if r.spec is not None]
    if not carried:
        return None
    specs = [spec for _, spec in carried]
    steps = sum(s.num_spec_steps for s in specs)
    positions = [sum(column) for column in zip_longest(*(s.accepted_per_position() for s in specs), fillvalue=0)]
    category = [(r.category or "uncategorized", r.category or "uncategorized", spec) for r, spec in carried]
    return SpecPerRequest(
        num_speculative_tokens=max(s.num_spec_tokens for s in specs),
        requests_without=len(ok) - len(carried),
        total=group_row("all", specs),
        per_position=[n / steps for n in positions] if steps else [],
        per_turn=_rows([(r.turn, str(r.turn), spec) for r, spec in carried]),
        per_category=_rows(category),
        per_prompt_length=_rows([(*prompt_bucket(r.prompt_tokens), spec) for r, spec in carried]),
    )


def reply_hashes(records: Sequence[RequestRecord]) -> dict[str, str]:
    """reply_sha256 keyed 'repeat/session/k' (k: the session's k-th request, the same in two matching runs)."""
    seen: dict[tuple[int, int], int] = {}
    out: dict[str, str] = {}
    for r in records:
        slot = (r.repeat, r.session)
        k = seen.get(slot, 0)
        seen[slot] = k + 1
        if r.ok and r.reply_sha256:
            out[f"{r.repeat}/{r.session}/{k}"] = r.reply_sha256
    return out


def table_lines(table: SpecPerRequest) -> list[str]:
    """The per-request acceptance block printed under a level (pooled τ and α; per-request τ p50/p90 spread)."""
    without = f", {table.requests_without} request(s) without it" if table.requests_without else ""
    turns = [replace(group, key=f"turn {group.key}") for group in table.per_turn]
    groups = [table.total, *turns, *table.per_category, *table.per_prompt_length]
    head = f"  per-request acceptance (metrics.speculative_decoding, K={table.num_speculative_tokens}{without}):"
    return [head, *stdout_table(SPEC_GROUPS, groups, prefix="    ")]
