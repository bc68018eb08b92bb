"""vLLM's per-request ``metrics.speculative_decoding``, parsed (docs/benchmark.md, "Per-request acceptance")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kimi_dflash.core.options import doc


@dataclass(slots=True, kw_only=True)
class RequestSpec:
    """One request's ``metrics.speculative_decoding`` as the server sent it."""

    num_spec_tokens: int = doc("K: draft tokens proposed per verify step")
    num_spec_steps: int = doc("verify steps of this request")
    num_accepted_draft_tokens: int = doc("draft tokens accepted (bonus tokens excluded)")
    num_draft_tokens: int = doc("draft tokens proposed")
    mean_acceptance_length: float = doc("server's τ = 1 + accepted / steps")
    draft_acceptance_rate: float = doc("server's accepted / drafted")
    acceptance_histogram: list[int] = doc("index j: verify steps that accepted exactly j draft tokens", factory=list)
    per_step_accepted: list[int] | None = doc(
        "accepted per verify step, in order (server level 'detailed')", omit_if_none=True
    )
    per_step_drafted: list[int] | None = doc(
        "drafted per verify step, in order (server level 'detailed')", omit_if_none=True
    )

    def accepted_per_position(self) -> list[int]:
        """Steps that accepted the draft token at position k, k = 0 .. K-1 (from the histogram)."""
        hist = self.acceptance_histogram
        return [sum(hist[k + 1 :]) for k in range(max(len(hist) - 1, 0))]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _ints(value: Any) -> list[int] | None:
    if not isinstance(value, list) or not all(_int(v) is not None for v in value):
        return None
    return list(value)


def parse(metrics: Any) -> RequestSpec | None:
    """The ``speculative_decoding`` block of a response's ``metrics`` object (None: absent or malformed)."""
    block = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(block, dict):
        return None
    counts = [_int(block.get(k)) for k in ("num_spec_tokens", "num_spec_steps", "num_accepted_draft_tokens")]
    drafted = _int(block.get("num_draft_tokens"))
    if any(c is None for c in counts) or drafted is None:
        return None
    k, steps, accepted = (c or 0 for c in counts)
    length, rate = block.get("mean_acceptance_length"), block.get("draft_acceptance_rate")
    if not isinstance(length, (int, float)):
        length = 1.0 + accepted / steps if steps else 1.0
    if not isinstance(rate, (int, float)):
        rate = accepted / drafted if drafted else 0.0
    return RequestSpec(
        num_spec_tokens=k,
        num_spec_steps=steps,
        num_accepted_draft_tokens=accepted,
        num_draft_tokens=drafted,
        mean_acceptance_length=float(length),
        draft_acceptance_rate=float(rate),
        acceptance_histogram=_ints(block.get("acceptance_histogram")) or [],
        per_step_accepted=_ints(block.get("per_step_accepted")),
        per_step_drafted=_ints(block.get("per_step_drafted")),
    )
