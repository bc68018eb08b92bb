"""The graph-mode candidate (pure); why and what it sets: docs/qualify.md (The graph-mode candidate)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kimi_dflash.config.schema import KEY
from kimi_dflash.config.validate import typed_values

GRAPH_MODE = "FULL_AND_PIECEWISE"  # vLLM's default for spec decode where the backend allows FULL decode graphs
VariantCheck = Callable[[dict[str, str]], tuple[bool, str]]  # the variant's config keys -> (passes, detail)


@dataclass(frozen=True)
class GraphCandidate:
    runs: bool
    reason: str  # why not, or what the variant sets
    overrides: tuple[tuple[str, str], ...] = ()


def capture_sizes(k: int, max_num_seqs: int) -> list[int]:
    """Multiples of 1 + k (a verify step's tokens per request) for 1, 2, 4, 8 requests, every 8 up to MAX_NUM_SEQS and
    it: k=2 at 32 seqs gives 3, 6, 12, 24, 48, 72, 96 (configs/production-graphs.env)."""
    step = 1 + k
    requests = [n for n in (1, 2, 4) if n < max_num_seqs] + list(range(8, max_num_seqs, 8)) + [max_num_seqs]
    return sorted({step * n for n in requests})


def graph_overrides(values: Mapping[str, str], k: int) -> tuple[tuple[str, str], ...]:
    """A compilation config of the config's own is kept as written: the rules judge it."""
    typed = typed_values(values)
    extra = typed.extra_vllm_args or ""
    overrides: list[tuple[str, str]] = [(KEY.ENFORCE_EAGER, "false")]
    if "--compilation-config" not in extra and "capture-sizes" not in extra and "graph-sizes" not in extra:
        sizes = capture_sizes(k, typed.max_num_seqs)
        compilation = f'{{"cudagraph_mode": "{GRAPH_MODE}", "cudagraph_capture_sizes": [{", ".join(map(str, sizes))}]}}'
        overrides.append((KEY.EXTRA_VLLM_ARGS, f"{extra} --compilation-config '{compilation}'".strip()))
    return tuple(overrides)


def graph_candidate(
    values: Mapping[str, str], k: int, box_kind: str, check: VariantCheck | None = None
) -> GraphCandidate:
    """``check``: the runtime rules on the variant (None: not checked), run only when nothing else rules it out."""
    if box_kind == "cpu":
        return GraphCandidate(False, "the CPU build has no HIP/CUDA graphs to capture (the demo runs eager)")
    if not typed_values(values).enforce_eager:
        return GraphCandidate(False, "the candidate already runs with graphs (ENFORCE_EAGER=false)")
    if check is None:
        return GraphCandidate(False, "the graph variant was not checked against the serving vLLM")
    overrides = graph_overrides(values, k)
    passes, detail = check(dict(overrides))
    if not passes:
        return GraphCandidate(False, f"the runtime rules refuse the graph variant on this vLLM: {detail}")
    return GraphCandidate(True, " ".join(f"{key}={value}" for key, value in overrides), overrides)


_DOWNGRADE = re.compile(r"setting cudagraph_mode=([A-Z_]+)|Overriding to (?:CUDAGraphMode\.)?([A-Z_]+)")
_RESOLVED = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.([A-Z_]+)")


@dataclass(frozen=True)
class GraphMode:
    mode: str | None  # CUDAGraphMode name the server ended with; None when the log does not say
    line: str  # the part of the log line that says so
    downgraded: bool  # vLLM lowered the mode after start-up (a warning, nothing fails)


def graph_mode_from_log(text: str) -> GraphMode:
    """vLLM lowers the mode after start when a backend cannot serve FULL graphs (vllm #49547); the last line wins."""
    found = GraphMode(None, "", False)
    for line in text.splitlines():
        lowered = _DOWNGRADE.search(line)
        if lowered:
            found = GraphMode(lowered.group(1) or lowered.group(2), _around(line, lowered), True)
            continue
        resolved = _RESOLVED.search(line)
        if resolved:  # a new engine's config: what an earlier start lowered no longer applies
            found = GraphMode(resolved.group(1), _around(line, resolved), False)
    return found


def _around(line: str, match: re.Match[str]) -> str:
    return line[max(0, match.start() - 200) : match.end()].strip()
