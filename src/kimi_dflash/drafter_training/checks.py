"""Checks run before a phase spends hours; each returns a problem message (what is wrong and the fix) or None."""

from __future__ import annotations

import shutil
from pathlib import Path

from kimi_dflash.core import http

GIB = 1024**3


def disk_problem(path: Path, need_bytes: int) -> str | None:
    probe = Path(path)
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need_bytes:
        return (
            f"{path}: {free / GIB:.1f} GiB free, this phase needs about {need_bytes / GIB:.1f} GiB: free space "
            "or pass --work-dir on a larger disk"
        )
    return None


def server_problem(base_url: str, model: str | None, api_key: str | None = None) -> str | None:
    """None when the server answers /v1/models and serves `model` (any model when None)."""
    try:
        reply = http.request(base_url.rstrip("/") + "/v1/models", api_key=api_key, timeout_s=10.0)
        if reply.status in (401, 403):  # it answers: the key is at fault, not the server
            key = "a wrong API key" if api_key else "no API key"
            return f"{base_url} answered HTTP {reply.status} to {key}: set OPENAI_API_KEY to the target's API_KEY"
        if reply.status != 200:
            raise OSError(f"answered HTTP {reply.status}")
        models = [str(entry.get("id")) for entry in reply.json().get("data") or []]
    except (OSError, ValueError) as error:
        return (
            f"{base_url}/v1/models: no answer ({error}); start the target first, e.g. kimi-dflash serve "
            "configs/production.env --wait (demo: kimi-dflash serve demo-cpu --wait)"
        )
    if not models:
        return f"{base_url}/v1/models lists no model"
    if model is not None and model not in models:
        return (
            f"{base_url} serves {models}, not {model!r}: regenerate with the target the drafter is for "
            "(pass --served-model to name it)"
        )
    return None


def gpu_problem(needed: int) -> str | None:
    """GPUs counted as serve.sh's preflight counts them (amd-smi / rocm-smi, nvidia-smi, *_VISIBLE_DEVICES)."""
    from kimi_dflash.preflight.accelerators import detect
    from kimi_dflash.preflight.host import HostProbe

    probe = HostProbe()
    found = max(len(detect(device, probe, None).devices) for device in ("rocm", "cuda"))
    if found < needed:
        return (
            f"{needed} GPU(s) needed for SpecForge training, {found} found: run the train phase on the GPU "
            "machine (8x MI300X), or --gpus N to train on fewer"
        )
    return None
