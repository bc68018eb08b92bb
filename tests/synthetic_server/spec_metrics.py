"""The per-request ``metrics.speculative_decoding`` block, counted exactly as ``Stats.count_verify_step`` counts
the /metrics counters, so a client's per-request sums can be checked against the counter deltas."""

from __future__ import annotations

from typing import Any

LEVELS = ("none", "summary", "detailed")


def block(sizes: list[int], spec_tokens: int, level: str) -> dict[str, Any] | None:
    """vLLM's shape for a reply cut into chunks of ``sizes`` tokens: every chunk after the first is one verify
    step of K drafts with ``size - 1`` accepted (None when the level is 'none' or there is no speculation)."""
    if level == "none" or spec_tokens <= 0:
        return None
    accepted = [min(size - 1, spec_tokens) for size in sizes[1:]]
    steps = len(accepted)
    histogram = [0] * (spec_tokens + 1)
    for n in accepted:
        histogram[n] += 1
    total = sum(accepted)
    drafted = steps * spec_tokens
    out: dict[str, Any] = {
        "mean_acceptance_length": 1.0 + total / steps if steps else 1.0,
        "draft_acceptance_rate": total / drafted if drafted else 0.0,
        "acceptance_histogram": histogram,
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": total,
        "num_draft_tokens": drafted,
        "num_spec_tokens": spec_tokens,
    }
    if level == "detailed":
        out["per_step_accepted"] = accepted
        out["per_step_drafted"] = [spec_tokens] * steps
    return out
