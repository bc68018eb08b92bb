"""Serve a DFlash drafter at the RoPE amplitude DRAFTER_ROPE_AMPLITUDE names (rules/rope_amplitude.py; docs/patches.md):
where the serving vLLM gives another, from a digest-named overlay in the project cache (symlinks and a config.json
stating `attention_factor`), built privately and moved into place whole; checked before reuse, removed unused."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimi_dflash.checkpoint import CONFIG_FILE, Facts, facts_from_config, read_config
from kimi_dflash.config.schema import KEY
from kimi_dflash.core.atomic_write import publish_directory
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.user_files import UnreadableFile, read_user_bytes
from kimi_dflash.launch.private_files import UnsafeLocation, private_dir
from kimi_dflash.rules.rope_amplitude import RopeDecision

if TYPE_CHECKING:
    from kimi_dflash.config.schema import ConfigValues

NOTE = "kimi-dflash-overlay.json"  # what the overlay changed and why, beside the config
OWN = (CONFIG_FILE, NOTE)  # the overlay's own files: never links to the drafter's entries of these names
OVERLAYS = "drafter-rope"  # under the project cache
UNUSED_S, LEFTOVER_S = 7 * 86400, 3600  # removed: an overlay unused this long, a half-built or retired copy this old


def _dump(document: object) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=False) + "\n").encode()


def note_unreadable(facts: Facts, values: ConfigValues, say: Callable[[str], None]) -> None:
    """A DFlash drafter whose config.json or rope fields are not understood is never rewritten: said."""
    if values.draft_model_dir is None or values.speculative_method != "dflash":
        return
    drafter, refused = facts.drafter, facts.problems.get(values.draft_model_dir)  # preflight's drafter-dir check too
    rope = None if drafter is None or not drafter.dflash else drafter.rope
    if refused or (rope and rope.problem):
        say(f"drafter RoPE: {refused or rope.problem}: not understood, never rewritten; served as configured")  # type: ignore[union-attr]


def apply(facts: Facts, decision: RopeDecision, cache: Path, create: bool, say: Callable[[str], None]) -> Facts:
    """The facts to serve: the drafter's replaced by its overlay (built when `create`, else named; UserError when it
    cannot be); shipped facts (no directory) stay as they are."""
    if (drafter := facts.drafter) is None or drafter.directory is None:
        return facts
    say(f"drafter RoPE: {decision.message}")
    config, release = decision.overlay_config(drafter.raw), decision.release
    note = {
        "why": f"{KEY.DRAFTER_ROPE_AMPLITUDE}={decision.choice} (engine: no overlay)",
        "vllm": release.version,
        "amplitude_without_overlay": release.amplitude,
        "decided_at": release.where,
        "changed": {f"{field}.attention_factor": decision.served for field in decision.rope.fields},
        "drafter": str(drafter.directory),
    }
    root = cache / OVERLAYS
    try:
        names = sorted(entry.name for entry in drafter.directory.iterdir() if entry.name not in OWN)
        digest = hashlib.sha256(b"\0".join([_dump(drafter.raw), _dump(config), _dump(names), _dump(note)]))
        target = root / digest.hexdigest()[:20]
        if create:
            build_overlay(root, target, drafter.directory, names, config, _dump(note))
    except (OSError, UnsafeLocation) as error:
        cause = (
            f"cannot build the overlay in {root} ({error.strerror or error})" if isinstance(error, OSError) else error
        )
        fix = f"or set {KEY.DRAFTER_ROPE_AMPLITUDE}=engine to serve the drafter as it is"
        raise UserError(f"drafter RoPE: {cause}; {fix}", 1) from None
    say(f"drafter RoPE: {'the drafter is served' if create else 'a start serves the drafter'} from {target}")
    served = facts_from_config(config, str(target / CONFIG_FILE), "drafter", shipped=False, directory=target)
    return replace(facts, drafter=replace(served, overlay=note))


def build_overlay(
    root: Path, target: Path, drafter_dir: Path, names: list[str], config: dict[str, Any], note: bytes
) -> None:
    """The overlay at `target` in the private directory `root`: kept when intact, else built beside it (its own
    files first, created exclusively, never through a link) and moved there whole; then stale copies go."""
    private_dir(root, follow_symlinks=False)  # another user's overlay here would be served (docs/security.md)
    if _intact(target, drafter_dir, names, config, note):
        os.utime(target)  # in use: not pruned
    else:
        staging = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
        try:
            for name, data in ((CONFIG_FILE, _dump(config)), (NOTE, note)):
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                with os.fdopen(os.open(staging / name, flags, 0o644), "wb") as handle:
                    handle.write(data)
            for name in names:
                os.symlink(drafter_dir / name, staging / name)
            publish_directory(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    _prune(root, target)


def _intact(target: Path, drafter_dir: Path, names: list[str], config: dict[str, Any], note: bytes) -> bool:
    """Exactly what would be built: the links to the drafter's entries and the overlay's own files, unchanged."""
    try:
        if sorted(os.listdir(target)) != sorted([*names, *OWN]) or (target / CONFIG_FILE).is_symlink():
            return False
        if any(os.readlink(target / name) != str(drafter_dir / name) for name in names):
            return False
        return (
            read_user_bytes(target / NOTE, follow_symlinks=False) == note and read_config(target, "overlay") == config
        )
    except (OSError, UnreadableFile):
        return False


def _prune(root: Path, keep: Path) -> None:
    """Remove this user's overlays no start has used for UNUSED_S, and leftovers of interrupted builds."""
    for entry in os.scandir(root):
        limit = LEFTOVER_S if entry.name.startswith((".building-", ".retired-")) else UNUSED_S
        with contextlib.suppress(OSError):  # gone meanwhile: nothing to remove
            info = entry.stat(follow_symlinks=False)
            old = entry.path != str(keep) and time.time() - info.st_mtime > limit
            if old and stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
                shutil.rmtree(entry.path, ignore_errors=True)
