"""Spec-decode counters from ``/metrics`` and their window deltas, summed over engines (docs/benchmark.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kimi_dflash.bench.result import SpecDecode, SpecDecodeStatus

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
CACHE_CONFIG_INFO = "vllm:cache_config_info"


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


# A sample line: name, optional {label="value",...} (values may hold escaped quotes, commas and braces), value.
_LABEL = r'\s*([a-zA-Z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?'
_SAMPLE = re.compile(
    r'(?P<name>[^\s{]*)(?:\{(?P<labels>(?:\s*\w+\s*=\s*"(?:[^"\\]|\\.)*"\s*,?)*)\s*\}\s*|\s+)(?P<value>\S+)'
)


def parse_samples(text: str) -> list[Sample]:
    """Parse the Prometheus text exposition format; lines that do not parse are skipped."""
    samples: list[Sample] = []
    for raw in text.splitlines():
        match = _SAMPLE.match(raw.strip())
        if match is None or raw.lstrip().startswith("#"):
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = {
            key: re.sub(r"\\(.)", lambda e: "\n" if e[1] == "n" else e[1], shown)
            for key, shown in re.findall(_LABEL, match["labels"] or "")
        }
        samples.append(Sample(name=match["name"], labels=labels, value=value))
    return samples


@dataclass(frozen=True)
class SpecCounters:
    """Cumulative spec-decode counters at one instant."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_pos: dict[int, float] = field(default_factory=dict)


def _select(samples: list[Sample], name: str, model: str | None) -> list[Sample]:
    chosen = [s for s in samples if s.name == name]
    if model is not None and any(s.labels.get("model_name") == model for s in chosen):
        chosen = [s for s in chosen if s.labels.get("model_name") == model]
    return chosen


def spec_counters(samples: list[Sample], model: str | None = None) -> SpecCounters | None:
    """The spec-decode counters, summed over engines; None if the server exports none (no speculation)."""
    drafts = _select(samples, DRAFTS, model)
    if not drafts:
        return None
    per_pos: dict[int, float] = {}
    for sample in _select(samples, ACCEPTED_PER_POS, model):
        try:
            position = int(sample.labels.get("position", ""))
        except ValueError:
            continue
        per_pos[position] = per_pos.get(position, 0.0) + sample.value
    return SpecCounters(
        drafts=sum(s.value for s in drafts),
        draft_tokens=sum(s.value for s in _select(samples, DRAFT_TOKENS, model)),
        accepted=sum(s.value for s in _select(samples, ACCEPTED, model)),
        accepted_per_pos=per_pos,
    )


def spec_delta(before: SpecCounters | None, after: SpecCounters | None) -> tuple[SpecDecode | None, SpecDecodeStatus]:
    """Acceptance over a window and its status (meanings: docs/benchmark.md, "Speculative decoding")."""
    if before is None or after is None:
        return None, "absent"
    drafts = after.drafts - before.drafts
    draft_tokens = after.draft_tokens - before.draft_tokens
    accepted = after.accepted - before.accepted
    positions = sorted(set(before.accepted_per_pos) | set(after.accepted_per_pos))
    per_pos = [after.accepted_per_pos.get(p, 0.0) - before.accepted_per_pos.get(p, 0.0) for p in positions]
    if min([drafts, draft_tokens, accepted, *per_pos]) < 0:
        return None, "counter_reset"
    if drafts <= 0 or draft_tokens <= 0:
        return None, "no_drafts"
    spec = SpecDecode(
        acceptance_rate=accepted / draft_tokens,
        acceptance_length=1.0 + accepted / drafts,
        per_position=[value / drafts for value in per_pos],
        num_speculative_tokens=len(positions) if positions else round(draft_tokens / drafts),
        drafts=round(drafts),
        draft_tokens=round(draft_tokens),
        accepted_tokens=round(accepted),
    )
    return spec, "ok"


def cache_config(samples: list[Sample]) -> dict[str, str] | None:
    """Labels of ``vllm:cache_config_info`` (block size, prefix caching, KV dtype ...), engine label dropped."""
    for sample in samples:
        if sample.name == CACHE_CONFIG_INFO:
            return {k: v for k, v in sample.labels.items() if k != "engine"}
    return None
