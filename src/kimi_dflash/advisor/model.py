"""Predict decode speed for every k at every measured concurrency (pure; docs/workflows.md, the advisor)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from kimi_dflash.bench.result import BenchmarkResult, LevelResult
from kimi_dflash.config.schema import KEY
from kimi_dflash.core.errors import UserError

ASSUMPTIONS = (
    "p_i from the largest-k run; τ(k) = 1 + Σ_{i<k} p_i (drafts for smaller k are that block's first k tokens)",
    "step time s = TPOT p50 × measured τ, linear in k at each concurrency (fitted over the speculative runs)",
    "aggregate = nearest measured run's aggregate × its request time / the predicted one (TTFT and N unchanged)",
    (
        "k = 0 (no speculation) is not extrapolated: shown where measured; predictions stay within the measured "
        "k's acceptance positions"
    ),
)


@dataclass(frozen=True)
class Measured:
    source: str
    k: int
    sessions: int
    output_tok_s: float
    tpot_s: float  # median
    per_user_tok_s: float  # median of 1/TPOT
    ttft_s: float  # mean
    tokens_per_request: float  # mean N
    tau: float  # measured acceptance length (1.0 without speculation)
    per_position: tuple[float, ...]
    drafts: int

    @property
    def step_s(self) -> float:
        return self.tpot_s * self.tau


MEDIANS = ("output_tok_s", "tpot_s", "per_user_tok_s", "ttft_s", "tokens_per_request")  # repeats merge by median


@dataclass(frozen=True)
class Prediction:
    k: int
    sessions: int
    tau: float
    step_s: float | None
    per_user_tok_s: float
    output_tok_s: float
    measured: Measured | None
    fitted: bool  # the measurement (if any) was used to fit the model

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured aggregate tok/s."""
        return None if self.measured is None else self.output_tok_s / self.measured.output_tok_s - 1.0


def spec_tokens_of(result: BenchmarkResult, level: LevelResult) -> int:
    if result.server_config is not None:
        values = result.server_config.values
        if values.get(KEY.SPECULATIVE_METHOD, "none") == "none":  # a result that does not say: no speculation
            return 0
        return int(values.get(KEY.NUM_SPECULATIVE_TOKENS) or 0)
    spec = level.spec_decode
    return 0 if spec is None else spec.num_speculative_tokens or len(spec.per_position)


def measurements(results: Sequence[tuple[str, BenchmarkResult]]) -> list[Measured]:
    found = []
    for source, result in results:
        for level in result.results:
            tpot_ms, per_user, ttft_ms = level.tpot_ms.p50, level.per_user_tok_s.p50, level.ttft_ms.mean
            tokens = level.output_tokens_per_request.mean if level.output_tokens_per_request else None
            if level.partial or None in (level.output_tok_s, tpot_ms, per_user, ttft_ms) or not tokens:
                continue
            k = spec_tokens_of(result, level)
            spec = level.spec_decode
            if k > 0 and spec is None:
                continue  # speculative run without acceptance counters: cannot be used
            found.append(
                Measured(
                    source=source,
                    k=k,
                    sessions=level.sessions,
                    output_tok_s=float(level.output_tok_s),  # type: ignore[arg-type]
                    tpot_s=tpot_ms / 1000,
                    per_user_tok_s=float(per_user),
                    ttft_s=ttft_ms / 1000,  # type: ignore[operator]
                    tokens_per_request=float(tokens),
                    tau=spec.acceptance_length if spec else 1.0,
                    per_position=tuple(spec.per_position) if spec else (),
                    drafts=(spec.drafts or 0) if spec else 0,
                )
            )
    return merge_repeats(found)


def merge_repeats(found: Sequence[Measured]) -> list[Measured]:
    """One measurement per (k, concurrency): repeated runs combined by their median, which one disturbed run cannot
    move far; acceptance weighted by drafts."""
    groups: dict[tuple[int, int], list[Measured]] = {}
    for m in found:
        groups.setdefault((m.k, m.sessions), []).append(m)
    merged = []
    for (k, sessions), group in sorted(groups.items()):
        if len(group) == 1:
            merged.append(group[0])
            continue
        weights = [max(m.drafts, 1) for m in group]
        medians = {name: median(getattr(m, name) for m in group) for name in MEDIANS}
        merged.append(
            Measured(
                source=" + ".join(m.source for m in group),
                k=k,
                sessions=sessions,
                tau=sum(w * m.tau for w, m in zip(weights, group)) / sum(weights),
                per_position=weighted_per_position([(m.drafts, m.per_position) for m in group]),
                drafts=sum(m.drafts for m in group),
                **medians,
            )
        )
    return merged


def weighted_per_position(runs: Sequence[tuple[int | None, Sequence[float]]]) -> tuple[float, ...]:
    """Acceptance per draft position over ``runs``, weighted by their drafts (>= 1 each), at positions all measured."""
    weights = [max(drafts or 0, 1) for drafts, _ in runs]
    positions = min(len(p) for _, p in runs)
    return tuple(sum(w * p[i] for w, (_, p) in zip(weights, runs)) / sum(weights) for i in range(positions))


def acceptance_per_position(runs: Sequence[Measured]) -> tuple[float, ...]:
    """p_i from the largest k measured, averaged over its concurrencies weighted by drafts."""
    if not (speculative := [m for m in runs if m.k > 0 and m.per_position]):
        raise UserError("no speculative run with acceptance counters: the advisor needs at least one run at k >= 1.")
    top = max(m.k for m in speculative)
    return weighted_per_position([(m.drafts, m.per_position) for m in speculative if m.k == top])


def tau(p: Sequence[float], k: int) -> float:
    return 1.0 + sum(p[:k])


def fit_step(runs: Sequence[Measured]) -> tuple[float, float]:
    """(a, b) of s = a + b·k by least squares; a single k gives b = 0 (no growth can be seen)."""
    ks = [m.k for m in runs]
    steps = [m.step_s for m in runs]
    mean_k, mean_s = sum(ks) / len(ks), sum(steps) / len(steps)
    spread = sum((k - mean_k) ** 2 for k in ks)
    slope = 0.0 if spread == 0 else sum((k - mean_k) * (s - mean_s) for k, s in zip(ks, steps)) / spread
    return mean_s - slope * mean_k, slope


def predict(runs: Sequence[Measured], fit_k: set[int] | None = None) -> tuple[tuple[float, ...], list[Prediction]]:
    """Predictions for k = 0 (measured only) and 1 .. K at every concurrency measured at k >= 1, fitted on ``fit_k``."""
    fitting = [m for m in runs if fit_k is None or m.k in fit_k]
    p = acceptance_per_position(fitting)
    predictions: list[Prediction] = []
    for sessions in sorted({m.sessions for m in fitting if m.k > 0}):
        here = [m for m in fitting if m.sessions == sessions and m.k > 0]
        if len({m.k for m in here}) < 2:
            # One k shows no growth of the step time with k: a fitted slope of 0 would favour the largest k.
            raise UserError(
                f"at {sessions} sessions the runs have only k={here[0].k} (k >= 1): the step-time slope cannot be "
                "measured, so no k can be recommended. Add runs at a second k, e.g. a sweep with "
                "--grid NUM_SPECULATIVE_TOKENS=1,2,4 (or restrict --fit-k to k measured at every concurrency)."
            )
        a, b = fit_step(here)
        measured_here = {m.k: m for m in runs if m.sessions == sessions}
        if (base := measured_here.get(0)) is not None:
            row = (base.step_s, base.per_user_tok_s, base.output_tok_s, base, fit_k is None or 0 in fit_k)
            predictions.append(Prediction(0, sessions, 1.0, *row))
        for k in range(1, len(p) + 1):
            step = a + b * k
            tpot = step / tau(p, k)
            nearest = min(here, key=lambda m: (abs(m.k - k), m.k))
            request = nearest.ttft_s + (nearest.tokens_per_request - 1) * nearest.tpot_s
            predicted_request = nearest.ttft_s + (nearest.tokens_per_request - 1) * tpot
            measured = measured_here.get(k)
            predictions.append(
                Prediction(
                    k=k,
                    sessions=sessions,
                    tau=tau(p, k),
                    step_s=step,
                    per_user_tok_s=1.0 / tpot,
                    output_tok_s=nearest.output_tok_s * request / predicted_request,
                    measured=measured,
                    fitted=measured is not None and (fit_k is None or k in fit_k),
                )
            )
    return p, predictions


def recommend(predictions: Sequence[Prediction]) -> dict[int, Prediction]:
    """Per concurrency, the k with the highest aggregate tok/s (measured where it was measured)."""

    def aggregate(pred: Prediction) -> float:
        return pred.measured.output_tok_s if pred.measured and pred.fitted else pred.output_tok_s

    best: dict[int, Prediction] = {}
    for pred in predictions:
        if pred.sessions not in best or aggregate(pred) > aggregate(best[pred.sessions]):
            best[pred.sessions] = pred
    return best
