"""The sweep's points as servers: which config keys each point's server gets."""

from __future__ import annotations

from pathlib import Path

from kimi_dflash.sweep.grid import Point
from kimi_dflash.sweep.points import PointPlan
from repo_paths import CONFIGS_DIR


def test_a_positive_k_serves_the_configs_own_method_not_dflash(tmp_path: Path) -> None:
    """Regression: every point with k >= 1 used to be served SPECULATIVE_METHOD=dflash, which the config rules
    refuse for the EAGLE3 demo (and which would serve another drafter kind for a real EAGLE3 config)."""
    point = Point((("NUM_SPECULATIVE_TOKENS", "2"),))
    for config, method in (("demo-cpu-eagle3.env", "eagle3"), ("demo-cpu.env", "dflash"), ("baseline.env", "dflash")):
        plan = PointPlan(config=CONFIGS_DIR / config, points=[point], sessions=(1,), bench_args=[], out=tmp_path)
        assert plan.env(point) == {"NUM_SPECULATIVE_TOKENS": "2", "SPECULATIVE_METHOD": method}
    assert plan.env(Point((("NUM_SPECULATIVE_TOKENS", "0"),))) == {"SPECULATIVE_METHOD": "none"}
