"""qualify --candidates: several drafter configs against one reference in one run. The plan (pure), then whole runs
with serve.sh stood in for by the instrument server (serve_stand_in: no vLLM) and the greedy outputs faked per
served model (the instrument server returns no token ids): a candidate that is not lossless fails the run with exit 2
and is named; the ranking orders the lossless ones at the matched concurrency."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

from extras import needs_cpu_extra
from kimi_dflash.core import options
from kimi_dflash.core.errors import UserError
from kimi_dflash.qualify import cli as qualify_cli
from kimi_dflash.qualify import lossless, steps
from kimi_dflash.qualify.shootout import CandidateConfig, build_shootout
from kimi_dflash.validate import engine
from kimi_dflash.validate.client import Completion, served_model
from qualify_fakes import fakes
from repo_paths import REPO_ROOT
from serve_stand_in import STAND_IN_SERVE, kill_servers, stand_in

CONFIGS = REPO_ROOT / "configs"
CPU = {"DEVICE": "cpu", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "16",
       "FABRICATE_DEMO_MODELS": "kimi"}  # fmt: skip
EAGLE3 = {**CPU, "SPECULATIVE_METHOD": "eagle3", "NUM_SPECULATIVE_TOKENS": "3", "FABRICATE_DEMO_MODELS": "kimi-eagle3"}


def _candidates(*values: dict[str, str]) -> list[CandidateConfig]:
    names = ("demo-cpu.env", "demo-cpu-eagle3.env", "third.env")
    return [CandidateConfig(name, CONFIGS / name, v) for name, v in zip(names, values)]


def test_the_shoot_out_serves_the_reference_once_then_each_candidates_qualify_steps_and_ranks_them() -> None:
    plan = build_shootout(CPU, _candidates(CPU, EAGLE3))
    names = [s.name for s in plan.steps]
    assert names[:4] == ["environment", "preflight", "reference", "fp8"] and names[-2:] == ["ranking", "report"]
    for name in ("demo-cpu", "demo-cpu-eagle3"):
        assert [n.split("/")[1] for n in names if n.startswith(f"{name}/")] == [
            "candidate", "amplitude", "grid", "acceptance", "per_request", "goodput", "advisor"]  # fmt: skip
    assert plan.k_values == (0,) and [c.plan.k_values for c in plan.candidates] == [(0, 4, 1, 2), (0, 3, 1, 2)]
    assert [c.plan.method for c in plan.candidates] == ["dflash", "eagle3"]
    assert all(c.plan.sessions == plan.sessions == (1, 2, 4) for c in plan.candidates)
    assert [c.same_target for c in plan.candidates] == [True, False]  # another demo bundle: its own tokenizer
    text = "\n".join(qualify_cli.render(plan, "demo-cpu"))
    assert "candidate demo-cpu-eagle3 (demo-cpu-eagle3.env): SPECULATIVE_METHOD=eagle3, k in {3, 1, 2}" in text


def test_the_budget_trims_the_candidates_extra_k_largest_first_then_concurrency_never_a_candidate() -> None:
    full = build_shootout(CPU, _candidates(CPU, EAGLE3))
    trimmed = build_shootout(CPU, _candidates(CPU, EAGLE3), budget_s=full.total_s - 1)
    assert trimmed.trimmed == ("demo-cpu-eagle3: k=2",) and trimmed.within_budget
    tight = build_shootout(CPU, _candidates(CPU, EAGLE3), budget_s=1)
    assert tight.trimmed[:4] == ("demo-cpu-eagle3: k=2", "demo-cpu: k=2", "demo-cpu-eagle3: k=1", "demo-cpu: k=1")
    assert tight.sessions == (4,) and [c.plan.k_values for c in tight.candidates] == [(0, 4), (0, 3)]
    # The matched concurrency is what every config allows.
    assert build_shootout({**CPU, "MAX_NUM_SEQS": "2"}, _candidates(CPU, EAGLE3)).sessions == (1, 2)


@pytest.mark.parametrize(
    ("candidates", "message"),
    [
        (_candidates(CPU, {**EAGLE3, "DEVICE": "rocm"}), "DEVICE=rocm but the reference's is cpu"),
        (_candidates(CPU, {**CPU, "SPECULATIVE_METHOD": "none"}), "demo-cpu-eagle3.env: qualify needs a speculative"),
        ([*_candidates(CPU), *_candidates(CPU)], "two candidates are named demo-cpu"),
    ],
)
def test_a_shoot_out_that_would_not_compare_drafters_is_refused_naming_the_candidate(candidates, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UserError, match=message):
        build_shootout(CPU, candidates)


def test_candidate_options_for_one_candidate_are_refused_in_a_shoot_out(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(CONFIGS / "demo-cpu.env"), "--candidates", "demo-cpu.env", "--candidate-env", "BLOCK_SIZE=32"]
    assert options.run(qualify_cli, [*argv, "--dry-run"]) == 1
    assert "--candidate-env and --project-acceptance concern one candidate" in capsys.readouterr().err


# ------------------------------------------------------------------------------ whole runs with the stand-in


def _greedy(url: str, prompts, max_tokens: int, concurrency: int = 8) -> lossless.GreedyOutputs:  # type: ignore[no-untyped-def]
    """What a server's greedy outputs would be: the reference's tokens, except from the server of a config named
    not-lossless (the stand-in serves each config under its file name)."""
    model = asyncio.run(served_model(url, None))
    ids = [1, 2, 9, 9] if model == "not-lossless" else [1, 2, 3, 4]
    done = Completion("text", ids, 4, 4, "length")
    return lossless.GreedyOutputs(model=model, max_tokens=max_tokens, prompts=list(prompts),
                                  completions=[done] * len(prompts))  # fmt: skip


@pytest.fixture
def shoot_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Run qualify --candidates with the stand-in serve.sh (each config served under its file name), no preflight or
    environment capture, greedy outputs faked per served model; yields a runner (args -> exit code, OUT)."""
    serve = stand_in(tmp_path / "stand-in", monkeypatch)
    serve.write_text(STAND_IN_SERVE.replace("--spec-tokens", '--model "$(basename "$1" .env)" --spec-tokens'))
    monkeypatch.setattr(steps, "STEPS", {**steps.STEPS, **fakes(set(steps.STEPS) - {"environment", "preflight"})})
    monkeypatch.setattr(lossless, "generate", _greedy)

    async def detokenize(server, ids, api_key):  # type: ignore[no-untyped-def]
        return " ".join(map(str, ids))

    monkeypatch.setattr(engine, "detokenize", detokenize)
    monkeypatch.setenv("PER_REQUEST_SPEC_METRICS", "off")  # the instrument server is not asked for them here
    bad = tmp_path / "not-lossless.env"
    bad.write_text(f"EXTENDS={CONFIGS / 'demo-cpu.env'}\n")
    out = tmp_path / "out"

    def run(*candidates: str) -> tuple[int, Path]:
        argv = [str(CONFIGS / "demo-cpu.env"), "--candidates", ",".join(candidates), "--budget", "1s", "--no-plots",
                "--out", str(out), "--serve-sh", str(serve)]  # fmt: skip
        return options.run(qualify_cli, argv), out

    yield run, str(bad)
    kill_servers(tmp_path / "stand-in")


@needs_cpu_extra
def test_a_candidate_that_is_not_lossless_fails_the_run_with_exit_2_and_is_named(shoot_out, capsys) -> None:  # type: ignore[no-untyped-def]
    run, bad = shoot_out
    code, out = run(str(CONFIGS / "demo-cpu.env"), bad)
    assert code == 2, capsys.readouterr().err[-3000:]
    state = json.loads((out / "state.json").read_text())
    assert all(s["status"] in ("done", "skipped") for s in state["steps"].values()), state["steps"]
    verdicts = {name: json.loads((out / "candidates" / name / "lossless" / "verdict.json").read_text())["verdict"]
                for name in ("demo-cpu", "not-lossless")}  # fmt: skip
    assert verdicts == {"demo-cpu": "PASS", "not-lossless": "FAIL"}
    text = (out / "report.md").read_text(encoding="utf-8")
    assert text.splitlines()[0].startswith("# Shoot-out of ") and text.splitlines()[0].endswith(": FAIL")
    assert f"- **`{bad}` lossless (T=0 token identity): FAIL** — 0/8 outputs token-identical" in text
    assert f"- **`{CONFIGS / 'demo-cpu.env'}` lossless (T=0 token identity): PASS** — 8/8" in text
    assert f"First divergence of `{bad}`: prompt 0" in text and "- candidate: `9 9` ids [9, 9]" in text
    ranking = json.loads((out / "shootout.json").read_text())
    assert [(r["candidate"], r["rank"], r["lossless"]) for r in ranking["rows"]] == [
        ("demo-cpu", 1, "PASS"), ("not-lossless", None, "FAIL")]  # fmt: skip
    assert ranking["rows"][1]["note"] == "not lossless: never ranked"
    # The reference served once, its outputs and k=0 result shared by both candidates' steps.
    assert sorted(p.name for p in (out / "grid").glob("*.json")) == ["NUM_SPECULATIVE_TOKENS-0.json"]
    for name in ("demo-cpu", "not-lossless"):
        assert sorted(p.name for p in (out / "candidates" / name / "grid").glob("*.json")) == [
            "NUM_SPECULATIVE_TOKENS-4.json"]  # fmt: skip


@needs_cpu_extra
def test_lossless_candidates_are_ranked_at_the_matched_concurrency_and_the_report_says_by_what(shoot_out) -> None:  # type: ignore[no-untyped-def]
    run, _ = shoot_out
    code, out = run(str(CONFIGS / "demo-cpu.env"), str(CONFIGS / "demo-cpu-eagle3.env"))
    assert code == 0
    ranking = json.loads((out / "shootout.json").read_text())
    assert ranking["sessions"] == 4 and "at 4 sessions" in ranking["ranked_by"]
    assert "goodput at the SLO (TTFT <= 1000 ms, user tok/s >= 50), then output tok/s" in ranking["ranked_by"]
    rows = ranking["rows"]
    assert sorted(r["rank"] for r in rows) == [1, 2] and {r["method"] for r in rows} == {"dflash", "eagle3"}
    first, second = rows
    assert (first["output_goodput"], first["output_tok_s"]) >= (second["output_goodput"], second["output_tok_s"])
    assert all(r["speedup"]["sessions"] == 4 and len(r["per_position"]) == r["k"] for r in rows)
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "## Ranking" in text and text.index("## Ranking") < text.index("## Candidate `")
    assert "## Candidate `" in text and "### Acceptance by draft position" in text
    assert "### The recipe's published MI300X figures beside this candidate" in text
    host = f"-{socket.gethostname()}-qualify"
    results = sorted(p.name.replace(host, "") for p in (out / "results").glob("*.json"))
    assert results == ["demo-cpu-eagle3-k3.json", "demo-cpu-k0.json", "demo-cpu-k4.json"]
