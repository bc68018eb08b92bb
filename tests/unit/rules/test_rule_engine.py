"""The rule engine (rules/engine.py): every rule of rules/catalog/ found and declared once, and a new rule - a module
holding it, the facts it reads and its remedy - reaches the verdict, serve's plan (the remedy applied by
launch/prepare.py), the docs' rules table and the runtime-facts table without touching anything else
(docs/development.md, "A runtime rule")."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kimi_dflash.patcher.registry import PATCHES
from kimi_dflash.rules import catalog, engine
from kimi_dflash.rules.catalog.patches import condition
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.source import VllmSource
from kimi_dflash_lab import matrix

# A made-up miniature of vLLM: the file the example rule reads a line of.
ROTARY = "vllm/model_executor/layers/rotary_embedding/yarn_scaling_rope.py"
MINI_VLLM = {
    "vllm/__init__.py": "",
    "vllm/_version.py": '__version__ = "0.99.0"\n',
    ROTARY: "def yarn_get_mscale(scale, mscale=1.0):\n    return 0.1 * mscale * math.log(scale) + 1.0\n",
}
# The example: what a next-round drafter trap looks like. It reads the drafter's config.json and a per-release
# source fact with its file:line, and declares that fact as a docs column.
EXAMPLE = '''
from kimi_dflash.core.checks import Remedy, failed, passed
from kimi_dflash.rules.model import Fact, Rule
from kimi_dflash.rules.source import SourceLine

ROTARY = "vllm/model_executor/layers/rotary_embedding/yarn_scaling_rope.py"
PIN = "KIMI_DFLASH_EXAMPLE_PIN"


def yarn_mscale(source) -> SourceLine | None:
    """Where this release scales YaRN's amplitude by its own formula."""
    return source.line_of(ROTARY, "def yarn_get_mscale(")


def _check(deployment, source):
    rope = (deployment.drafter.config if deployment.drafter else {}).get("rope_scaling") or {}
    if rope.get("type") != "yarn":
        return []
    where = yarn_mscale(source)
    if where is None:
        return [passed("no YaRN amplitude formula in this release")]
    if deployment.env.get(PIN) == "1":
        return [passed(f"the amplitude is pinned ({PIN}=1)")]
    detail = f"drafter YaRN factor {rope['factor']}: amplitude from {where}"
    if deployment.option_keys:  # a launcher's plan: serve applies the remedy
        return [passed(detail, (Remedy("env", PIN, "1"),))]
    return [failed(detail, f"{PIN}=1", "YaRN")]


RULES = (
    Rule(
        "example drafter rope",
        "the drafter's YaRN amplitude",
        "why it matters",
        "yarn_get_mscale in rotary_embedding/",
        "the general fix",
        _check,
        silent_at_startup="the amplitude is only wrong in the numbers",
        upstream=("vllm #0",),
        facts=(Fact("YaRN amplitude formula", lambda source, deployment: str(yarn_mscale(source))),),
    ),
)
'''


@pytest.fixture
def example_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    extra = tmp_path / "catalog"
    extra.mkdir()
    (extra / "example_drafter_rope.py").write_text(textwrap.dedent(EXAMPLE))
    monkeypatch.setattr(catalog, "__path__", [*catalog.__path__, str(extra)])
    engine.all_rules.cache_clear()
    yield extra
    engine.all_rules.cache_clear()


def test_every_rule_is_declared_once_with_what_the_docs_show() -> None:
    rules = engine.all_rules()
    assert len({r.id for r in rules}) == len(rules) >= 17
    assert all(r.title and r.why and r.reads and r.fix for r in rules)
    visible = [r.startup_visible for r in rules]
    assert visible == sorted(visible, reverse=True)  # start-up rules first, then the runtime traps
    table = matrix.rules_table()
    assert all(f"| {r.id} | {r.title} |" in table for r in rules)
    assert all(f.label in matrix.runtime_header() for r in rules for f in r.facts)


def test_a_new_rule_module_reaches_the_verdict_serves_plan_and_the_docs(example_rule: Path, tmp_path: Path) -> None:
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
    # the docs, regenerated offline from the declarations and the committed per-release facts
    assert "| example drafter rope | the drafter's YaRN amplitude |" in matrix.rules_table()
    assert "no: the amplitude is only wrong in the numbers | vllm #0 |" in matrix.rules_table()
    assert "YaRN amplitude formula" in matrix.runtime_header()
    assert "| ? |" in matrix.runtime_table(matrix.load())  # not read from the wheels yet: matrix --write does


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
