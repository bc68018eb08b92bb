"""A level's per-request acceptance table and reply hashes, from its records (pure functions).

Definitions are in ``spec_request`` and docs/benchmark.md ("Per-request acceptance").
"""

from __future__ import annotations

from collections.abc import Sequence

from kimi_dflash.bench import spec_request
from kimi_dflash.bench.columns import ACCEPTANCE_LENGTH, ACCEPTANCE_RATE
from kimi_dflash.bench.metrics import summarize
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.result import SpecGroup, SpecPerRequest
from kimi_dflash.bench.spec_request import RequestSpec


def group_row(key: str, specs: Sequence[RequestSpec]) -> SpecGroup:
    sums = spec_request.totals(specs)
    lengths, rates = spec_request.per_request_values(specs)
    return SpecGroup(
        key=key,
        requests=sums.requests,
        spec_steps=sums.steps,
        accepted_tokens=sums.accepted,
        draft_tokens=sums.drafted,
        acceptance_length=sums.acceptance_length,
        acceptance_rate=sums.acceptance_rate,
        acceptance_length_dist=summarize(lengths),
        acceptance_rate_dist=summarize(rates),
    )


def spec_per_request(records: Sequence[RequestRecord]) -> SpecPerRequest | None:
    """The level's per-request acceptance (None when no successful request carried the statistics)."""
    ok = [r for r in records if r.ok]
    carried = [r for r in ok if r.spec is not None]
    if not carried:
        return None
    specs = [r.spec for r in carried if r.spec is not None]
    sums = spec_request.totals(specs)
    by_turn = spec_request.groups([(str(r.turn), r.spec) for r in carried if r.spec], order=int)
    by_category = spec_request.groups([(r.category or "uncategorized", r.spec) for r in carried if r.spec], order=str)
    by_length = spec_request.groups(
        [(spec_request.prompt_bucket(r.prompt_tokens), r.spec) for r in carried if r.spec],
        order=spec_request.bucket_order,
    )
    return SpecPerRequest(
        num_speculative_tokens=max(s.num_spec_tokens for s in specs),
        requests_without=len(ok) - len(carried),
        total=group_row("all", specs),
        per_position=[n / sums.steps for n in sums.per_position] if sums.steps else [],
        per_turn=[group_row(k, v) for k, v in by_turn],
        per_category=[group_row(k, v) for k, v in by_category],
        per_prompt_length=[group_row(k, v) for k, v in by_length],
    )


def reply_hashes(records: Sequence[RequestRecord]) -> dict[str, str]:
    """reply_sha256 of each successful request keyed 'repeat/session/k' (k: the session's k-th request).

    Records are appended in send order, and a session sends one request at a time, so k is the same
    request in two runs that sent the same conversations (same seed, dataset and workload settings).
    """
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
    """The per-request acceptance block printed under a level (pooled τ and α; per-request τ p50/p10 spread)."""
    lines = [
        f"  per-request acceptance (metrics.speculative_decoding, K={table.num_speculative_tokens}"
        + (f", {table.requests_without} request(s) without it" if table.requests_without else "")
        + "):",
        "    group             requests   steps   tau   tau p50   tau p90   accept   accept p50",
    ]
    tau, alpha = ACCEPTANCE_LENGTH.fmt, ACCEPTANCE_RATE.fmt  # the level's τ and α, shown alike
    sections = (("", [table.total]), ("turn ", table.per_turn), ("", table.per_category), ("", table.per_prompt_length))
    for prefix, rows in sections:
        for row in rows:
            lines.append(
                f"    {(prefix + row.key)[:16]:<16}  {row.requests:>8}  {row.spec_steps:>6}"
                f"  {tau(row.acceptance_length):>4}  {tau(row.acceptance_length_dist.p50):>8}"
                f"  {tau(row.acceptance_length_dist.p90):>8}  {alpha(row.acceptance_rate):>7}"
                f"  {alpha(row.acceptance_rate_dist.p50):>11}"
            )
    return lines
