"""--slo: which requests meet the objectives, attainment and goodput (docs/benchmark.md, "SLOs and goodput")."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from kimi_dflash.bench.metrics import e2el, tpot, ttft
from kimi_dflash.bench.records import CANCELLED, RequestRecord
from kimi_dflash.bench.result import Goodput, LevelResult

# --slo name -> stored key -> the limit in words; a time (a maximum) carries ms or s, user_tps is a bare tok/s
_NAMES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2el_s", "user_tps": "user_tok_s"}
_WORDS = {
    "ttft_ms": "TTFT <= {:g} ms",
    "tpot_ms": "TPOT <= {:g} ms",
    "e2el_s": "E2EL <= {:g} s",
    "user_tok_s": "user tok/s >= {:g}",
}
DEFAULT_ATTAINMENT = 0.9  # the share of requests meeting the SLO for a load to count as sustained
_TO_MS = {"ms": 1.0, "s": 1000.0}
_VALUE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)?\s*$")


def parse_slo(text: str) -> dict[str, float]:
    """``--slo`` to {ttft_ms, tpot_ms, e2el_s, user_tok_s}; a time needs its unit (a bare 500 could be ms or s)."""
    out: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, raw = part.partition(":")
        name = name.strip().lower()
        if not sep or name not in _NAMES:
            raise ValueError(
                f"--slo {text!r}: {part.strip()!r} is not name:value with name one of {', '.join(_NAMES)} "
                "(e.g. ttft:500ms,tpot:50ms,e2el:10s,user_tps:20)"
            )
        match = _VALUE.match(raw)
        key = _NAMES[name]
        unit = key != "user_tok_s"
        if match is None or (not unit and match.group(2)):
            unit_hint = "a number in tok/s" if not unit else "a number with ms or s"
            raise ValueError(f"--slo {text!r}: {name} needs {unit_hint}, got {raw.strip()!r}")
        if unit and not match.group(2):
            raise ValueError(
                f"--slo {text!r}: {name} needs a unit, ms or s (e.g. {name}:{match.group(1)}ms or {name}:"
                f"{match.group(1)}s), got {raw.strip()!r}"
            )
        if key in out:
            raise ValueError(f"--slo {text!r}: {name} is given twice; give each objective once")
        value = float(match.group(1))
        if unit:  # in ms first: a limit finite in s but not in ms is refused
            ms = value * _TO_MS[match.group(2)]
            value = ms if key.endswith("_ms") else ms / 1000.0
        if not math.isfinite(value):
            raise ValueError(f"--slo {text!r}: {name} {raw.strip()!r} is not a finite number")
        if value <= 0:
            raise ValueError(f"--slo {text!r}: {name} must be > 0")
        out[key] = value
    if not out:
        raise ValueError(f"--slo {text!r}: no objective given (e.g. ttft:500ms,tpot:50ms)")
    return out


def violated(record: RequestRecord, slo: dict[str, float]) -> list[str]:
    """The SLO keys a successful record misses (a failed record misses all of them)."""
    if not record.ok:
        return list(slo)
    missed = []
    first, per_token, latency = ttft(record), tpot(record), e2el(record)
    if "ttft_ms" in slo and (first is None or first * 1000.0 > slo["ttft_ms"]):
        missed.append("ttft_ms")
    if "tpot_ms" in slo and per_token is not None and per_token * 1000.0 > slo["tpot_ms"]:
        missed.append("tpot_ms")
    if "user_tok_s" in slo and per_token is not None and (per_token <= 0 or 1.0 / per_token < slo["user_tok_s"]):
        missed.append("user_tok_s")
    if "e2el_s" in slo and (latency is None or latency > slo["e2el_s"]):
        missed.append("e2el_s")
    return missed


def meets(record: RequestRecord, slo: dict[str, float]) -> bool:
    return record.ok and not violated(record, slo)


def goodput(records: Sequence[RequestRecord], duration_s: float, slo: dict[str, float]) -> Goodput:
    """Attainment and goodput of a level's records over its measured window (definitions: module doc)."""
    judged = [r for r in records if r.error != CANCELLED]
    good = [r for r in judged if meets(r, slo)]
    violations = dict.fromkeys(slo, 0)
    for r in judged:
        if r.ok:
            for key in violated(r, slo):
                violations[key] += 1
    tokens = sum(r.output_tokens or 0 for r in good)
    return Goodput(
        slo=dict(slo),
        requests=len(judged),
        met=len(good),
        attainment=len(good) / len(judged) if judged else None,
        request_goodput=len(good) / duration_s if duration_s > 0 else None,
        output_goodput=tokens / duration_s if duration_s > 0 else None,
        violations=violations,
    )


def describe(slo: dict[str, float]) -> str:
    """``TTFT <= 500 ms, TPOT <= 50 ms``: the SLO in words, for tables."""
    return ", ".join(_WORDS[k].format(v) for k, v in slo.items() if k in _WORDS)


def sustained(
    levels: dict[float, LevelResult], threshold: float = DEFAULT_ATTAINMENT
) -> tuple[float, LevelResult] | None:
    """The highest load whose SLO attainment is at least ``threshold`` (None: no level does)."""
    attained = {key: level.goodput.attainment for key, level in levels.items() if level.goodput}
    ok = [key for key, attainment in attained.items() if attainment is not None and attainment >= threshold]
    return (max(ok), levels[max(ok)]) if ok else None
