"""Serve z-lab's Kimi DFlash drafters with the RoPE amplitude they were trained with (issue 28; docs/patches.md).

From vLLM 0.30 their YaRN config gets amplitude 1.0 instead of the trained 1.4159, and an explicit
`attention_factor` is honoured: so they are served from an overlay in the project cache (symlinks plus a
config.json that adds it), named by a digest of what it is made from and moved into place whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kimi_dflash.core.atomic_write import publish_directory
from kimi_dflash.core.user_files import UnreadableFile, read_user_json
from kimi_dflash.rules.rope_amplitude import (
    ROPE_FIX_KEY,
    AmplitudeVerdict,
    DrafterRope,
    UnreadableRope,
    drafter_rope,
    is_dflash_drafter,
    judge,
)
from kimi_dflash.rules.source import VllmSource

CONFIG = "config.json"
NOTE = "kimi-dflash-overlay.json"  # what the overlay changed and why, beside the config
OVERLAYS = "drafter-rope"  # under the project cache


@dataclass(frozen=True)
class RopeFix:
    action: Literal["none", "overlay", "off", "cannot"]
    message: str | None  # one line for the operator (None: nothing worth saying, e.g. not a z-lab drafter)
    config: Mapping[str, Any] | None = None  # the overlay's config.json
    note: Mapping[str, Any] | None = None


def concerned(drafter_config: Mapping[str, Any]) -> bool:
    """A DFlash drafter with z-lab's Kimi YaRN fields and no explicit attention_factor."""
    rope = drafter_rope(drafter_config)
    return is_dflash_drafter(drafter_config) and rope is not None and rope.is_zlab_kimi_profile()


def decide(drafter_config: Mapping[str, Any], source: VllmSource | None, enabled: bool) -> RopeFix:
    """Pure: what to do for a drafter (its parsed config.json) on the vLLM whose source is given."""
    rope = drafter_rope(drafter_config)
    if rope is None or not concerned(drafter_config):
        return RopeFix("none", None)
    if source is None:
        return RopeFix("cannot", "drafter RoPE: no vLLM in this Python to read; the drafter is served as configured")
    try:
        verdict = judge(source, rope)
    except UnreadableRope as error:
        return RopeFix(
            "cannot", f"drafter RoPE: cannot read this vLLM's YaRN amplitude ({error}); served as configured"
        )
    if verdict.matches:
        return RopeFix("none", f"drafter RoPE: {verdict.describe()}: nothing to do")
    if not enabled:
        return RopeFix("off", f"drafter RoPE: {verdict.describe()}; not restored ({ROPE_FIX_KEY}=false)")
    if not verdict.honours_attention_factor:
        return RopeFix(
            "cannot",
            f"drafter RoPE: {verdict.describe()}, and this vLLM ignores rope attention_factor "
            f"({verdict.release.factory_where}): no overlay can restore it; served as configured",
        )
    fixed = rope.with_attention_factor(verdict.trained)
    config = {**drafter_config, rope.field: {**rope.values, "attention_factor": verdict.trained}}
    return RopeFix(
        "overlay",
        f"drafter RoPE: {verdict.describe()}; serving it with {rope.field}.attention_factor = "
        f"{verdict.trained:.7f} ({ROPE_FIX_KEY}=false turns this off)",
        config=config,
        note=_note(verdict, fixed),
    )


def _note(verdict: AmplitudeVerdict, fixed: DrafterRope) -> dict[str, Any]:
    return {
        "why": "vLLM's YaRN amplitude for this drafter differs from the one it was trained with (issue 28)",
        "vllm": verdict.release.version,
        "amplitude_without_overlay": verdict.release.amplitude,
        "decided_at": verdict.release.where,
        "trained_amplitude": verdict.trained,
        "changed": {f"{fixed.field}.attention_factor": fixed.attention_factor},
        "turn_off": f"{ROPE_FIX_KEY}=false",
    }


def overlay_dir(root: Path, drafter_dir: Path, config_bytes: bytes, names: list[str], fix: RopeFix) -> Path:
    digest = hashlib.sha256()
    for part in (str(drafter_dir).encode(), config_bytes, "\0".join(names).encode(), _dump(fix.config)):
        digest.update(part + b"\0")
    return root / OVERLAYS / digest.hexdigest()[:20]


def _dump(document: object) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=False) + "\n").encode()


def build_overlay(target: Path, drafter_dir: Path, names: list[str], fix: RopeFix) -> Path:
    """Write the overlay (symlinks + config.json + note) beside `target`, then move it there whole."""
    if (target / CONFIG).is_file() and (target / NOTE).is_file():
        return target  # built before: the digest in its name says it is this drafter's
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        for name in names:
            if name != CONFIG:
                os.symlink(drafter_dir / name, staging / name)
        (staging / CONFIG).write_bytes(_dump(fix.config))
        (staging / NOTE).write_bytes(_dump({**(fix.note or {}), "drafter": str(drafter_dir)}))
        publish_directory(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def installed_source() -> VllmSource | None:
    """The source of the vLLM this interpreter serves with (read, never imported)."""
    from kimi_dflash.preflight.runtime_child import vllm_package_dir

    package_dir = vllm_package_dir()
    return None if package_dir is None else VllmSource.open(package_dir)


def prepare(
    drafter_dir: Path,
    enabled: bool,
    cache: Path,
    create: bool,
    say: Callable[[str], None],
    source: Callable[[], VllmSource | None] = installed_source,
) -> Path:
    """`drafter_dir` or its overlay (built when `create`); `source` is asked only for a drafter concerned."""
    drafter_dir = Path(drafter_dir).expanduser().resolve()
    config_path = drafter_dir / CONFIG
    try:
        config = read_user_json(config_path, what="drafter config") if config_path.is_file() else None
    except UnreadableFile:
        config = None
    if not isinstance(config, dict) or not concerned(config):
        # Not downloaded yet (or a repo id) or unreadable: the path checks and preflight say so, with the fix.
        return drafter_dir
    fix = decide(config, source(), enabled)
    if fix.message:
        say(fix.message)
    if fix.action != "overlay":
        return drafter_dir
    names = sorted(entry.name for entry in drafter_dir.iterdir())
    target = overlay_dir(cache, drafter_dir, config_path.read_bytes(), names, fix)
    if not create:
        say(f"drafter RoPE: a start serves the drafter from {target}")
        return drafter_dir
    build_overlay(target, drafter_dir, names, fix)
    say(f"drafter RoPE: the drafter is served from {target}")
    return target
