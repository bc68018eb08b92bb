"""A drafter shoot-out: several candidate configs against one reference in one qualify run (pure; docs/qualify.md)."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.bench.goodput import describe, parse_slo
from kimi_dflash.config.schema import KEY
from kimi_dflash.config.validate import typed_values
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.redaction import spelled_option
from kimi_dflash.demo.catalog import CHOICES
from kimi_dflash.qualify import measures, plan
from kimi_dflash.qualify.context import MODEL_KEYS
from kimi_dflash.qualify.documents import Advisor, RankRow, Shootout
from kimi_dflash.qualify.lossless import LosslessVerdict

CANDIDATE_STEPS = ("candidate", "amplitude", "grid", "acceptance", "per_request", "goodput", "advisor")
UNBOUNDED = 1e9  # a candidate's own plan is never trimmed alone: the shoot-out trims across candidates
NAME = re.compile(r"[A-Za-z0-9._-]+")  # a candidate's directory in OUT/candidates/
# What makes a config serve another model, or serve it elsewhere: a candidate must have the reference's.
TARGET_KEYS = (KEY.DEVICE, KEY.MODEL_DIR, KEY.MODEL_REPO, KEY.PRESHARD_DIR, KEY.DTYPE, KEY.HOST)
_MODEL_OPTIONS = ("--model", "--tokenizer", "--tokenizer-mode", "--tokenizer-revision", "--revision", "--code-revision")
TARGET_OPTIONS = (*_MODEL_OPTIONS, "--hf-overrides", "--hf-config-path", "--quantization", "--dtype", "--load-format")


@dataclass(frozen=True)
class CandidateConfig:
    config: str  # as given
    path: Path
    values: Mapping[str, str]
    k_limit: tuple[int, str] | None = None  # the AITER MLA verify cap on the serving vLLM (qualify/cli.py)
    same_key: bool = True  # its API_KEY is the reference's (the key itself is never kept)
    amplitude: tuple[plan.Sides, str] = ((), "not probed")  # its drafter's RoPE amplitudes to serve (amplitude.probe)

    @property
    def name(self) -> str:
        """The file name as given (a symlink's target may be named anything), without .env."""
        return Path(self.config).name.removesuffix(".env")


def target(values: Mapping[str, str]) -> dict[str, str]:
    """What decides the model a config serves and where: TARGET_KEYS, demo target, EXTRA_VLLM_ARGS' TARGET_OPTIONS."""
    found = {key: values.get(key) or "(unset)" for key in TARGET_KEYS}
    typed = typed_values(values)
    demo = typed.fabricate_demo_models
    found["the demo's target"] = CHOICES[demo].same_target_as or demo if demo in CHOICES else demo
    args = shlex.split(typed.extra_vllm_args or "")
    for index, arg in enumerate(args):
        option = spelled_option(arg, TARGET_OPTIONS)
        if option:
            found[f"{option} in EXTRA_VLLM_ARGS"] = arg.partition("=")[2] or " ".join(args[index + 1 : index + 2])
    return found


def _refuse_other_targets(values: Mapping[str, str], configs: Sequence[CandidateConfig]) -> None:
    ours, names = target(values), [c.name.lower() for c in configs]
    for c in configs:
        theirs, where = target(c.values), f"--candidates {c.config}"
        key = next((k for k in {**ours, **theirs} if ours.get(k) != theirs.get(k)), None)
        if not NAME.fullmatch(c.name) or c.name in (".", ".."):
            why = f"its name {c.name!r} (the file name without .env) is its directory in OUT/candidates/"
            raise UserError(f"{where}: {why}: use letters, digits, '.', '_', '-' (not '.' or '..'); rename the file.")
        if names.count(c.name.lower()) > 1:
            raise UserError(f"--candidates: two candidates are named {c.name} (case aside); give each file its name.")
        if key is not None:
            raise UserError(
                f"{where}: {key}={theirs.get(key, '(unset)')} but the reference's is {ours.get(key, '(unset)')}"
                "; a shoot-out compares drafters of one target served on one box. Give it the reference's."
            )
        if not c.same_key:
            raise UserError(
                f"{where}: its API_KEY is not the reference's; the run's clients send one key to every "
                "server. Give it the reference's API_KEY."
            )


def build_shootout(
    values: Mapping[str, str],
    configs: Sequence[CandidateConfig],
    budget_s: float | None = None,
    slo: str | None = None,
    per_request: plan.PerRequest | None = None,
) -> plan.QualifyPlan:
    """Candidates measured at the levels every MAX_NUM_SEQS allows; the budget trims extra k, then levels, never one."""
    _refuse_other_targets(values, configs)
    typed = typed_values(values)
    box = plan.box_for(typed.device)
    slo_text, per_request = plan.check_slo(slo, box), per_request or plan.PerRequest(False, "not probed")
    seqs = min(typed_values(v).max_num_seqs for v in (values, *(c.values for c in configs)))
    sessions, trimmed = plan.sessions_for(box, seqs), []
    budget = box.default_budget_s if budget_s is None else budget_s

    def own_plan(c: CandidateConfig, extra_k: Sequence[int] | None) -> plan.QualifyPlan:
        try:
            own = plan.build_plan(
                c.values,
                UNBOUNDED,
                slo,
                per_request,
                c.k_limit,
                extra_k=extra_k,
                sessions_levels=sessions,
                amplitude=c.amplitude,
                schedule=(False, "a shoot-out serves each candidate at its own k: qualify that config alone for one"),
            )
        except UserError as exc:
            raise UserError(f"--candidates {c.config}: {exc}") from None
        return dataclasses.replace(own, budget_s=budget)

    extras = {c.name: list(own_plan(c, None).k_values[2:]) for c in configs}
    fp8 = typed.kv_cache_dtype.startswith("fp8")
    same = {c.name: all(values.get(key) == c.values.get(key) for key in MODEL_KEYS) for c in configs}

    def make() -> plan.QualifyPlan:
        candidates = tuple(
            plan.Candidate(c.name, c.config, str(c.path), same[c.name], own_plan(c, extras[c.name])) for c in configs
        )
        base = {s.name: s for s in plan.planned_steps(box, 0, fp8, (0,), sessions, slo_text, per_request)}
        preflight = base["preflight"]
        title = f"{preflight.title}: the reference and each candidate"
        preflight = dataclasses.replace(preflight, estimate_s=box.preflight_s * (1 + len(configs)), title=title)
        own = [(c, s) for c in candidates for s in c.plan.steps if s.name in CANDIDATE_STEPS]
        renamed = (dataclasses.replace(s, name=f"{c.name}/{s.name}") for c, s in own)
        ranking = plan.Step("ranking", "rank the candidates by goodput and tok/s at the matched concurrency", 1.0)
        steps = (base["environment"], preflight, base["reference"], base["fp8"], *renamed, ranking, base["report"])
        excluded = tuple(f"{c.name}: {e}" for c in candidates for e in c.plan.excluded)
        bench = plan.bench_args(box, slo_text)
        head = (box, budget, 0, fp8, (0,), tuple(sessions), bench, steps, tuple(trimmed), slo_text)
        method = typed.speculative_method
        return plan.QualifyPlan(*head, per_request.server_env, excluded, method=method, candidates=candidates)

    def drop_largest_extra_k() -> str | None:
        largest = max(((k, name) for name, ks in extras.items() for k in ks), default=None)
        if largest is None:
            return None
        extras[largest[1]].remove(largest[0])
        return f"{largest[1]}: k={largest[0]}"

    return plan.fit_budget(make, trimmed, (drop_largest_extra_k, plan.fewer_sessions(sessions)))


@dataclass(frozen=True)
class Measured:
    """What a candidate's steps left: its grid results (the reference's k=0 first), lossless verdict, advisor."""

    candidate: plan.Candidate
    results: measures.Results
    verdict: LosslessVerdict | None
    advisor: Advisor | None


def matched_sessions(measured: Sequence[Measured]) -> int | None:
    """The highest concurrency the reference and every lossless candidate (at its own k) finished."""
    common: set[int] | None = None
    for m in (m for m in measured if m.verdict is not None and m.verdict.verdict == "PASS"):
        points = measures.by_k(m.results)
        mine = set(measures.levels_of(points, 0)) & set(measures.levels_of(points, m.candidate.plan.spec_tokens))
        common = mine if common is None else common & mine
    return max(common) if common else None


def rank(slo: str, measured: Sequence[Measured]) -> Shootout:
    """Lossless first (one that is not is never ranked), then output goodput at the SLO, then output tok/s."""
    sessions, rows = matched_sessions(measured), []
    for m in measured:
        k = m.candidate.plan.spec_tokens
        level = measures.levels_of(measures.by_k(m.results), k).get(sessions or -1)
        lossless = m.verdict.verdict if m.verdict else "NOT RUN"
        spec, goodput = (level.spec_decode, level.goodput) if level else (None, None)
        speedup = next((r for r in measures.matched(m.results) if r.k == k and r.sessions == sessions), None)
        advice = m.advisor.recommendations.get(str(sessions)) if m.advisor else None
        notes = {"FAIL": "not lossless: never ranked", "PASS": "" if level else "no result at the matched concurrency"}
        note = notes.get(lossless, "no lossless verdict")
        rows.append(
            RankRow(
                rank=None,
                candidate=m.candidate.name,
                config=m.candidate.config,
                method=m.candidate.plan.method,
                k=k,
                lossless=lossless,
                output_tok_s=measures._r(level.output_tok_s, 2) if level else None,
                output_goodput=measures._r(goodput.output_goodput, 2) if goodput else None,
                attainment=measures._r(goodput.attainment, 4) if goodput else None,
                speedup=speedup,
                tau=measures._r(spec.acceptance_length) if spec else None,
                per_position=[round(p, 4) for p in spec.per_position] if spec and spec.per_position else [],
                advisor_k=advice.k if advice else None,
                note=note,
            )
        )

    def key(row: RankRow) -> tuple[float, float]:
        return ((row.output_goodput or 0.0) if slo else 0.0, row.output_tok_s or 0.0)

    for place, row in enumerate(sorted((r for r in rows if not r.note), key=key, reverse=True), start=1):
        row.rank = place
    by = f"output goodput at the SLO ({describe(parse_slo(slo))}), then output tok/s" if slo else "output tok/s"
    where = f"at {sessions} sessions (the highest concurrency the reference and every lossless candidate measured)"
    return Shootout(
        sessions=sessions,
        ranked_by=f"ranked by {by} {where}" if sessions else "no matched concurrency",
        rows=sorted(rows, key=lambda r: (r.rank is None, r.rank or 0)),
    )
