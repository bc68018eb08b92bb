"""Per-position acceptance rates for vLLM's synthetic rejection sampler, checked as SpeculativeConfig does (one per
drafted token, in [0, 1], non-increasing) before a server loads for minutes. Rates are unconditional, exactly the
benchmark's `per_position` acceptance (a result JSON's list can be passed as is)."""

from __future__ import annotations


def parse_acceptance_rates(text: str) -> tuple[float, ...]:
    """'0.8,0.6,0.4' -> (0.8, 0.6, 0.4); ValueError naming the problem and the expected form."""
    parts = [p.strip() for p in text.replace(" ", ",").split(",") if p.strip()]
    if not parts:
        raise ValueError("no rates given: write one rate per drafted token, e.g. 0.8,0.6,0.4")
    rates = []
    for part in parts:
        try:
            rates.append(float(part.rstrip("%")) / (100.0 if part.endswith("%") else 1.0))
        except ValueError:
            raise ValueError(f"{part!r} is not a number: write rates such as 0.8,0.6,0.4 (or 80%,60%,40%)") from None
    outside = [format_rate(r) for r in rates if not 0.0 <= r <= 1.0]
    if outside:
        raise ValueError(f"rates must lie in [0, 1]; got {', '.join(outside)}")
    rising = next((i for i in range(1, len(rates)) if rates[i] > rates[i - 1]), None)
    if rising is not None:
        raise ValueError(
            f"rates must not increase with position (position {rising + 1}: {format_rate(rates[rising])} after "
            f"{format_rate(rates[rising - 1])}); they are unconditional: position i is only reached through i - 1"
        )
    return tuple(rates)


def format_rate(rate: float) -> str:
    return f"{rate:g}"
