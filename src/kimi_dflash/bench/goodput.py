"""Service-level objectives: which requests a user would call good, attainment and goodput (pure).

``--slo ttft:500ms,tpot:50ms,e2el:10s,user_tps:20``: comma-separated ``name:value`` pairs.
  ttft      TTFT at most this           (unit ms or s, required: a bare number is refused)
  tpot      TPOT at most this           (ms or s, required)
  e2el      E2EL at most this           (ms or s, required)
  user_tps  per-user tok/s (1 / TPOT) at least this (a bare number, tok/s)
Each objective at most once; values finite and > 0.
A request *meets the SLOs* when it succeeded and meets every limit given. A request with N < 2 has no
TPOT: it meets the tpot and user_tps limits (nothing was decoded after its first token).
Per level:
  attainment      = requests meeting the SLOs / requests judged (successful + failed; cancelled excluded)
  request goodput = requests meeting the SLOs / wall time of the measured window
  output goodput  = Σ N over requests meeting the SLOs / the same window (tok/s)
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from kimi_dflash.bench.metrics import e2el, tpot, ttft
from kimi_dflash.bench.records import CANCELLED, RequestRecord
from kimi_dflash.bench.result import Goodput

# name -> (stored key, whether the value is a time: then it carries ms or s; user_tps is a bare tok/s)
_NAMES = {
    "ttft": ("ttft_ms", "time"),
    "tpot": ("tpot_ms", "time"),
    "e2el": ("e2el_s", "time"),
    "user_tps": ("user_tok_s", ""),
}
_TO_MS = {"ms": 1.0, "s": 1000.0}
_VALUE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)?\s*$")

SLO_HELP = (
    "service-level objectives, e.g. ttft:500ms,tpot:50ms,e2el:10s,user_tps:20 (ttft/tpot/e2el are maxima and "
    "need their unit, ms or s; user_tps = 1/TPOT is a minimum in tok/s; each at most once). Adds attainment and "
    "goodput per level"
)


def parse_slo(text: str) -> dict[str, float]:
    """``--slo`` to {ttft_ms, tpot_ms, e2el_s, user_tok_s}; ValueError says what is wrong and the form. A time
    needs its unit (a bare 500 could be ms or s), each objective may be given once, and every value is finite."""
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
        key, unit = _NAMES[name]
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
        if unit:
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
    words = {"ttft_ms": "TTFT <= {:g} ms", "tpot_ms": "TPOT <= {:g} ms", "e2el_s": "E2EL <= {:g} s"}
    words["user_tok_s"] = "user tok/s >= {:g}"
    return ", ".join(words[k].format(v) for k, v in slo.items() if k in words)
