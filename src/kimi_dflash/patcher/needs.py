"""When a patch is needed: predicates over one planned deployment and the vLLM source it will run.

A pending patch matters only if the plan takes the code path it fixes. The launcher writes a file patch into
site-packages only when its predicate holds; the compatibility check lists only the patches the plan relies on.
Each predicate answers True / False, or None when the facts it needs are unknown (no drafter config, a vLLM
whose selector the source reader does not recognise); callers treat None as "may be needed".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kimi_dflash.patcher import source_facts

if TYPE_CHECKING:
    from kimi_dflash.patcher.vllm_source import VllmSource
    from kimi_dflash.preflight.deployment import Deployment

Predicate = Callable[["Deployment", "VllmSource"], "bool | None"]


@dataclass(frozen=True)
class Need:
    text: str  # the condition in words (docs, status tables)
    holds: Predicate

    def __str__(self) -> str:
        return self.text


def drafter_backend(deployment: Deployment, source: VllmSource) -> str | None:
    """The attention backend the DFlash drafter runs on: speculative_config.attention_backend when set, else the
    platform's first non-causal-capable backend (ROCm: ROCM_ATTN in every release 0.20-0.33)."""
    return deployment.drafter_attention_backend or source_facts.default_drafter_backend(source, deployment.platform)


def _all(*parts: bool | None) -> bool | None:
    if any(part is False for part in parts):
        return False
    return None if any(part is None for part in parts) else True


def _mla_target(deployment: Deployment) -> bool | None:
    return None if deployment.target is None else deployment.target.mla


def mla_target_with_dflash(deployment: Deployment, source: VllmSource) -> bool | None:
    return _all(deployment.dflash, _mla_target(deployment))


def drafter_metadata_without_causal(deployment: Deployment, source: VllmSource) -> bool | None:
    if not deployment.dflash:
        return False
    backend = drafter_backend(deployment, source)
    has_field = None if backend is None else source_facts.backend_metadata_has_causal(source, backend)
    return None if has_field is None else not has_field


def drafter_on(backend_name: str) -> Predicate:
    def holds(deployment: Deployment, source: VllmSource) -> bool | None:
        if not deployment.dflash:
            return False
        backend = drafter_backend(deployment, source)
        return None if backend is None else backend == backend_name

    holds.__name__ = f"drafter_on_{backend_name.lower()}"
    return holds


def mla_target_with_sliding_window_drafter(deployment: Deployment, source: VllmSource) -> bool | None:
    drafter = None if deployment.drafter is None else deployment.drafter.sliding_window
    return _all(deployment.dflash, _mla_target(deployment), drafter)
