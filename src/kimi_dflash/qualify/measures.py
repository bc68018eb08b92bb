"""What the benchmark's newer result fields say about a qualify grid (pure: results in, JSON-ready rows out)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kimi_dflash.bench.goodput import DEFAULT_ATTAINMENT, sustained
from kimi_dflash.bench.intervals import ratio_interval
from kimi_dflash.bench.reply_match import match_level
from kimi_dflash.bench.result import BenchmarkResult, LevelResult, SpecGroup
from kimi_dflash.config.schema import KEY
from kimi_dflash.qualify import documents

Results = Sequence[tuple[str, BenchmarkResult]]
CONFIDENCE = 0.95


def by_k(results: Results) -> dict[int, BenchmarkResult]:
    """Grid results keyed by k (a point without NUM_SPECULATIVE_TOKENS is not a grid point: left out)."""
    found = {}
    for _, result in results:
        k = str((result.server_config.overrides if result.server_config else {}).get(KEY.NUM_SPECULATIVE_TOKENS))
        if k.isdigit():
            found[int(k)] = result
    return dict(sorted(found.items()))


def _levels(result: BenchmarkResult) -> dict[int, LevelResult]:
    return {level.sessions: level for level in result.results if not level.partial}


def levels_of(points: dict[int, BenchmarkResult], k: int) -> dict[int, LevelResult]:
    """The finished levels of the grid point for ``k``, by concurrency (empty when that point did not finish)."""
    return _levels(points[k]) if k in points else {}


def _each_level(results: Results) -> Iterator[tuple[int, int, LevelResult]]:
    for k, result in by_k(results).items():
        for sessions, level in _levels(result).items():
            yield k, sessions, level


def _beside_reference(results: Results, greedy: bool = False) -> Iterator[tuple[int, int, LevelResult, LevelResult]]:
    """Each speculative level with the reference's (k=0) at its concurrency; ``greedy``: T=0 runs only."""
    points = by_k(results)
    if 0 not in points or (greedy and points[0].settings.temperature != 0):
        return
    reference = _levels(points[0])
    for k, result in points.items():
        if k and not (greedy and result.settings.temperature != 0):
            for sessions, level in _levels(result).items():
                if sessions in reference:
                    yield k, sessions, level, reference[sessions]


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def group(g: SpecGroup) -> documents.Group:
    tau, alpha = g.acceptance_length_dist, g.acceptance_rate_dist
    return documents.Group(
        key=g.key,
        requests=g.requests,
        steps=g.spec_steps,
        accepted=g.accepted_tokens,
        drafted=g.draft_tokens,
        tau=_r(g.acceptance_length),
        alpha=_r(g.acceptance_rate, 4),
        tau_min=_r(tau.min),
        tau_p50=_r(tau.p50),
        tau_p90=_r(tau.p90),
        tau_max=_r(tau.max),
        alpha_p50=_r(alpha.p50, 4),
    )


def per_request_rows(results: Results) -> list[documents.PerRequestRow]:
    """One row per speculative point and concurrency whose replies carried per-request statistics."""
    rows = []
    for k, sessions, level in _each_level(results):
        table, counters = level.spec_per_request, level.spec_decode
        if k == 0 or table is None:
            continue
        rows.append(
            documents.PerRequestRow(
                k=k,
                sessions=sessions,
                num_speculative_tokens=table.num_speculative_tokens,
                requests_without=table.requests_without,
                total=group(table.total),
                per_position=[round(p, 4) for p in table.per_position],
                per_turn=[group(g) for g in table.per_turn],
                per_prompt_length=[group(g) for g in table.per_prompt_length],
                per_category=[group(g) for g in table.per_category],
                counter_accepted=counters.accepted_tokens if counters else None,
                counter_drafted=counters.draft_tokens if counters else None,
            )
        )
    return rows


def goodput_rows(results: Results) -> list[documents.GoodputRow]:
    return [
        documents.GoodputRow(
            k=k,
            sessions=sessions,
            requests=gp.requests,
            met=gp.met,
            attainment=_r(gp.attainment, 4),
            output_goodput=_r(gp.output_goodput, 2),
            request_goodput=_r(gp.request_goodput, 4),
            output_tok_s=_r(level.output_tok_s, 2),
            violations=dict(gp.violations),
        )
        for k, sessions, level in _each_level(results)
        if (gp := level.goodput) is not None
    ]


def at_slo(results: Results, threshold: float = DEFAULT_ATTAINMENT) -> list[documents.AtSloRow]:
    """Sustained concurrency: the highest with attainment >= threshold; speedup over k=0's goodput at its own."""
    found: dict[int, tuple[int, LevelResult] | None] = {}
    for k, result in by_k(results).items():
        levels = _levels(result)
        if not any(level.goodput for level in levels.values()):
            continue
        best = sustained({float(s): level for s, level in levels.items()}, threshold)
        found[k] = (int(best[0]), best[1]) if best else None
    reference = found.get(0)
    base = reference[1].goodput.output_goodput if reference and reference[1].goodput else None
    rows = []
    for k, best in found.items():
        gp = best[1].goodput if best else None
        good = gp.output_goodput if gp else None
        rows.append(
            documents.AtSloRow(
                k=k,
                sustained_sessions=best[0] if best else None,
                attainment=_r(gp.attainment, 4) if gp else None,
                output_goodput=_r(good, 2),
                reference_sessions=reference[0] if reference else None,
                speedup=_r(good / base) if k and good is not None and base else None,
            )
        )
    return rows


def matched(results: Results, confidence: float = CONFIDENCE) -> list[documents.MatchedRow]:
    """No interval with fewer than 2 repeats on either side."""
    rows = []
    for k, sessions, level, base in _beside_reference(results):
        interval = ratio_interval(
            [r.output_tok_s for r in level.repeat_results] or [level.output_tok_s],
            [r.output_tok_s for r in base.repeat_results] or [base.output_tok_s],
            confidence,
        )
        if interval is not None:
            rows.append(
                documents.MatchedRow(
                    k=k,
                    sessions=sessions,
                    speedup=_r(interval.ratio),
                    low=_r(interval.low),
                    high=_r(interval.high),
                    significant=interval.significant,
                    confidence=confidence,
                    repeats=[len(level.repeat_results), len(base.repeat_results)],
                )
            )
    return rows


def reply_identity(results: Results) -> list[documents.ReplyIdentityRow]:
    """Empty when the reference is missing, a run was not greedy, or no hashes were stored."""
    return [
        documents.ReplyIdentityRow(
            k=k, sessions=sessions, compared=m.compared, identical=m.identical, first_difference=m.first_difference
        )
        for k, sessions, level, base in _beside_reference(results, greedy=True)
        if (m := match_level(base, level)) is not None
    ]


def projection_rows(
    results: Results, projection: BenchmarkResult, rates: Sequence[float], candidate_k: int
) -> list[documents.ProjectionRow]:
    """The counted acceptance length beside the one the rates imply (1 + sum): the projection checks itself."""
    points = by_k(results)
    reference, candidate = levels_of(points, 0), levels_of(points, candidate_k)
    expected_tau = 1.0 + sum(rates)
    rows = []
    for sessions, level in _levels(projection).items():
        base, measured = reference.get(sessions), candidate.get(sessions)
        spec = level.spec_decode
        rows.append(
            documents.ProjectionRow(
                sessions=sessions,
                output_tok_s=_r(level.output_tok_s, 2),
                per_user_tok_s_p50=_r(level.per_user_tok_s.p50, 2),
                tau_expected=_r(expected_tau),
                tau_measured=_r(spec.acceptance_length) if spec is not None else None,
                per_position_measured=[_r(p, 4) for p in spec.per_position] if spec and spec.per_position else [],
                reference_tok_s=_r(base.output_tok_s, 2) if base else None,
                speedup=_ratio(level, base),
                candidate_tok_s=_r(measured.output_tok_s, 2) if measured else None,
                candidate_speedup=_ratio(measured, base),
            )
        )
    return rows


def _ratio(level: LevelResult | None, base: LevelResult | None) -> float | None:
    if level is None or base is None or not level.output_tok_s or not base.output_tok_s:
        return None
    return _r(level.output_tok_s / base.output_tok_s)


def graph_rows(results: Results, graphs: BenchmarkResult, candidate_k: int) -> list[documents.GraphRow]:
    """Graphs change kernels, not proposals: acceptance should match the eager candidate's up to near-tie flips."""
    points = by_k(results)
    reference, eager = levels_of(points, 0), levels_of(points, candidate_k)
    rows = []
    for sessions, level in _levels(graphs).items():
        base, measured = reference.get(sessions), eager.get(sessions)
        rows.append(
            documents.GraphRow(
                sessions=sessions,
                output_tok_s=_r(level.output_tok_s, 2),
                per_user_tok_s_p50=_r(level.per_user_tok_s.p50, 2),
                tau=_r(level.spec_decode.acceptance_length) if level.spec_decode else None,
                eager_tok_s=_r(measured.output_tok_s, 2) if measured else None,
                eager_tau=_r(measured.spec_decode.acceptance_length) if measured and measured.spec_decode else None,
                speedup_vs_eager=_ratio(level, measured),
                reference_tok_s=_r(base.output_tok_s, 2) if base else None,
                speedup_vs_reference=_ratio(level, base),
            )
        )
    return rows
