"""The plugin-delivered versions of the registry's patches: same fixes, no file edits. Each installer rebinds one
function or method of the freshly imported vLLM module; installed only where the source shows the patch pending
(runtime.py), so never on top of an upstream fix or a file patch. Re-installing is a no-op."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

logger = logging.getLogger("vllm.plugins.kimi_dflash")

_TAG = "__kimi_dflash_patch__"


def _already(obj: object, patch_id: str) -> bool:
    return getattr(obj, _TAG, None) == patch_id


def force_causal_for_mla(selector_config: Any) -> Any:
    """An MLA layer is a target layer: never ask its backend for non-causal attention."""
    if getattr(selector_config, "use_mla", False) and getattr(selector_config, "use_non_causal", False):
        return selector_config._replace(use_non_causal=False)
    return selector_config


def wrap_cached_get_attn_backend(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def cached_get_attn_backend(*args: Any, **kwargs: Any) -> Any:
        if "attn_selector_config" in kwargs:
            kwargs["attn_selector_config"] = force_causal_for_mla(kwargs["attn_selector_config"])
        elif len(args) >= 2:
            args = (args[0], force_causal_for_mla(args[1]), *args[2:])
        return original(*args, **kwargs)

    if hasattr(original, "cache_clear"):
        cached_get_attn_backend.cache_clear = original.cache_clear  # type: ignore[attr-defined]
    setattr(cached_get_attn_backend, _TAG, "target-mla-causal")
    return cached_get_attn_backend


def install_target_mla_causal(selector: ModuleType) -> None:
    current = selector._cached_get_attn_backend
    if not _already(current, "target-mla-causal"):
        selector._cached_get_attn_backend = wrap_cached_get_attn_backend(current)


def check_drafter_layers_non_causal(draft_attn_groups: Iterable[Any], per_layer: Mapping[str, object]) -> None:
    """Raise unless every drafter layer attends non-causally: metadata with causal=False, or without a `causal`
    field on a backend that declares supports_non_causal()."""
    backends = {name: group.backend for group in draft_attn_groups for name in group.layer_names}
    for layer_name, attn_metadata in per_layer.items():
        if (causal := getattr(attn_metadata, "causal", None)) is False:
            continue
        backend = backends.get(layer_name)
        if causal is None and backend is not None and backend.supports_non_causal():
            continue
        backend_name = backend.get_name() if backend is not None else "unknown"
        raise RuntimeError(
            f"DFlash drafter layer {layer_name} runs on {backend_name}, which builds causal "
            "attention metadata; DFlash needs non-causal attention. Use a non-causal backend for "
            "the drafter (ROCM_ATTN, ROCM_AITER_FA, FLASH_ATTN, or TRITON_ATTN with the "
            "kimi-dflash patch triton-noncausal)."
        )


def install_dflash_assert_gate(dflash: ModuleType) -> None:
    proposer = dflash.DFlashProposer
    if _already(proposer.build_per_group_and_layer_attn_metadata, "dflash-assert-gate"):
        return

    def build_per_group_and_layer_attn_metadata(
        self: Any, cad: Any, draft_index: int = 0
    ) -> tuple[list[object], dict[str, object]]:
        # Skip DFlash's own unconditional assert: call the generic builder, then our check.
        per_group, per_layer = super(proposer, self).build_per_group_and_layer_attn_metadata(cad, draft_index)
        check_drafter_layers_non_causal(self.draft_attn_groups, per_layer)
        return per_group, per_layer

    setattr(build_per_group_and_layer_attn_metadata, _TAG, "dflash-assert-gate")
    proposer.build_per_group_and_layer_attn_metadata = build_per_group_and_layer_attn_metadata


class ConfigView:
    """Read-only view of a config object with a few attributes overridden."""

    def __init__(self, base: object, **overrides: object) -> None:
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "_overrides", overrides)

    def __getattr__(self, name: str) -> object:
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        return getattr(object.__getattribute__(self, "_base"), name)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ConfigView is read-only")


def config_for_layer(layer: Any, vllm_config: Any) -> Any:
    """The config a plain (non-MLA) sliding-window layer should be judged by: use_mla=False."""
    model_config = getattr(vllm_config, "model_config", None)
    if (
        getattr(layer, "sliding_window", None) is not None
        and getattr(model_config, "use_mla", False)
        and not layer.attn_backend.is_mla()
    ):
        return ConfigView(vllm_config, model_config=ConfigView(model_config, use_mla=False))
    return vllm_config


def install_mla_swa_assert(attention: ModuleType) -> None:
    layer_cls = attention.Attention
    original = layer_cls.get_kv_cache_spec
    if _already(original, "mla-swa-assert"):
        return

    @functools.wraps(original)
    def get_kv_cache_spec(self: Any, vllm_config: Any) -> Any:
        return original(self, config_for_layer(self, vllm_config))

    setattr(get_kv_cache_spec, _TAG, "mla-swa-assert")
    layer_cls.get_kv_cache_spec = get_kv_cache_spec


# patch id -> (module vLLM imports, installer)
INSTALLERS: dict[str, tuple[str, Callable[[ModuleType], None]]] = {
    "target-mla-causal": ("vllm.v1.attention.selector", install_target_mla_causal),
    "dflash-assert-gate": ("vllm.v1.spec_decode.dflash", install_dflash_assert_gate),
    "mla-swa-assert": ("vllm.model_executor.layers.attention.attention", install_mla_swa_assert),
}
