"""The demo's shipped data, and the one JSON encoding that keeps builds byte-identical."""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from typing import Any


def json_bytes(obj: object) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def shipped_text(name: str) -> str:
    """A file of kimi_dflash/data/demo/: the corpus (written for this project), chat templates, Kimi's config."""
    return resources.files("kimi_dflash").joinpath(f"data/demo/{name}").read_text(encoding="utf-8")


@functools.cache
def _kimi_configs() -> dict[str, Any]:
    return json.loads(shipped_text("kimi-k2.6-configs.json"))


def kimi_config_fragment(name: str) -> dict[str, Any]:
    """A copy of Kimi K2.6's config fields the miniature keeps unchanged (data/demo/kimi-k2.6-configs.json)."""
    return copy.deepcopy(_kimi_configs()[name])
