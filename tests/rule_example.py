"""A new compatibility rule as a next-round author writes it: one module holding the rule, the source fact it
reads and its remedy, on a made-up miniature of vLLM. tests/unit/rules/test_rule_engine.py shows it reaching the
verdict and serve's plan, lab/tests/test_compat_matrix.py the docs' tables."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_dflash.rules import catalog, engine

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


@contextlib.contextmanager
def example_rule_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The example rule's module in a catalog directory the engine searches, for one test (a fixture's body): the
    directory; the engine's rule cache is cleared on the way in and out."""
    extra = tmp_path / "catalog"
    extra.mkdir()
    (extra / "example_drafter_rope.py").write_text(textwrap.dedent(EXAMPLE))
    monkeypatch.setattr(catalog, "__path__", [*catalog.__path__, str(extra)])
    engine.all_rules.cache_clear()
    yield extra
    engine.all_rules.cache_clear()
