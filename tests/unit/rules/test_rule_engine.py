"""The rule engine (rules/engine.py): every rule of rules/catalog/ found and declared once, and a new rule - a module
holding it, the facts it reads and its remedy - reaches the verdict, serve's plan (the remedy applied by
launch/prepare.py) without touching anything else (docs/development.md, "A runtime rule"; the docs' rules table and
runtime-facts table, which the lab generates: lab/tests/test_compat_matrix.py)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_dflash.patcher.registry import PATCHES
from kimi_dflash.rules import engine
from kimi_dflash.rules.catalog.patches import condition
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.source import VllmSource
from rule_example import EXAMPLE, MINI_VLLM, ROTARY, example_rule_installed


@pytest.fixture
def example_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with example_rule_installed(tmp_path, monkeypatch) as extra:
        yield extra


def test_every_rule_is_declared_once_with_what_the_docs_show() -> None:
    rules = engine.all_rules()
    assert len({r.id for r in rules}) == len(rules) >= 17
    assert all(r.title and r.why and r.reads and r.fix for r in rules)
    visible = [r.startup_visible for r in rules]
    assert visible == sorted(visible, reverse=True)  # start-up rules first, then the runtime traps


def test_a_new_rule_module_reaches_the_verdict_serves_plan(example_rule: Path, tmp_path: Path) -> None:
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.launch.prepare import prepare
    from repo_paths import CONFIGS_DIR

    package = tmp_path / "site"
    for relpath, text in MINI_VLLM.items():
        (package / relpath).parent.mkdir(parents=True, exist_ok=True)
        (package / relpath).write_text(text)
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    rope = {"type": "yarn", "factor": 64, "mscale": 1.0, "mscale_all_dim": 1.0}
    (drafter / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "rope_scaling": rope}))
    spec = json.dumps({"method": "dflash", "model": str(drafter), "num_speculative_tokens": 2})
    planned = Deployment.from_command("rocm", ["vllm", "serve", "/m", "--speculative-config", spec])
    mini = VllmSource.from_package_dir(package / "vllm")
    verdict = engine.judge(planned, mini)
    [finding] = [f for f in verdict.findings if f.name == "example drafter rope"]
    assert finding.status == "fail" and f"{ROTARY}:1" in finding.detail and "factor 64" in finding.detail
    assert "example drafter rope" in [f.name for f in verdict.runtime_traps]
    # serve's plan: the rule's remedy applied, the plan judged again, now passing without it
    config = load_config(CONFIGS_DIR / "production.env", environ={"DRAFT_MODEL_DIR": str(drafter)})
    served = prepare(config, {}, source=lambda _plan: mini, say=lambda _: None)
    assert served.plan.env["KIMI_DFLASH_EXAMPLE_PIN"] == "1"
    [pinned] = [f for f in served.verdict.findings if f.name == "example drafter rope"]  # type: ignore[union-attr]
    assert pinned.status == "pass" and "pinned" in pinned.detail and pinned.relies == ()


def test_rule_ids_must_be_unique(example_rule: Path) -> None:
    (example_rule / "example_copy.py").write_text(textwrap.dedent(EXAMPLE))
    with pytest.raises(ValueError, match="example drafter rope"):
        engine.all_rules()


def test_every_patch_condition_is_one_the_rules_evaluate() -> None:
    planned = Deployment.from_command("rocm", ["vllm", "serve", "/m", "--speculative-config", '{"method": "dflash"}'])
    tree = VllmSource("empty", {}, str)
    for patch in PATCHES:
        for name in patch.needed_when.conditions if patch.needed_when else ():
            assert condition(name, planned, tree) in (True, False, None), name
    with pytest.raises(ValueError, match="unknown patch condition"):
        condition("drafter is happy", planned, tree)
