"""All-or-nothing writes across several files, and a lock so two patchers never interleave. Every new file goes to a
temporary file beside its target (same filesystem: the rename is atomic), then all are renamed into place; if any
step fails, files already replaced are put back from memory: the tree ends as it started."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path

from kimi_dflash.core.atomic_write import write_beside
from kimi_dflash.core.dir_lock import directory_lock
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.paths import cache_root
from kimi_dflash.patcher.model import NotWritable, PatcherError

_READ_ONLY_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}


def lock_path(root: Path) -> Path:
    """In this user's cache, never in the tree (a revert leaves it byte-identical) nor in the shared temp directory
    (anyone could plant the predictable name there, or hold a lock they can open)."""
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:16]
    return cache_root() / "run" / f"patcher-{digest}.lock"


@contextmanager
def patcher_lock(root: Path) -> Iterator[None]:
    """Exclusive, non-blocking lock per vLLM tree (core.dir_lock); released when the process exits, even on a crash."""
    path = lock_path(root)
    with ExitStack() as held:
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            held.enter_context(directory_lock(path.parent, path.name, what="patcher"))
        except (UserError, OSError) as problem:
            raise PatcherError(f"cannot patch {root}: {problem}") from None
        yield


def _not_writable(root: Path, path: Path, exc: OSError) -> NotWritable:
    return NotWritable(
        f"cannot write {path} ({exc.strerror}): this vLLM tree is read-only. Alternatives: "
        f"(1) rely on the kimi-dflash vLLM plugin, which applies the runtime patches in every vLLM "
        f"process without editing files (installed with this project; VLLM_PLUGINS must allow "
        f"'kimi_dflash'); (2) copy the package to a writable place, e.g. "
        f"`cp -r {root} /opt/vllm-patched/vllm`, patch it with `--vllm-root /opt/vllm-patched/vllm` "
        f"and put /opt/vllm-patched first on PYTHONPATH."
    )


def _write_temp(target: Path, text: str) -> Path:
    """The new text in a temporary file beside ``target``, with its mode (and owner, when we are root)."""
    tmp = write_beside(target, text.encode("utf-8"), suffix=".kimi-tmp")
    try:
        info = target.stat()
        try:
            os.chown(tmp, info.st_uid, info.st_gid)
        except PermissionError:
            pass  # not root: the file keeps our ownership, as any pip install would
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_all_or_nothing(root: Path, changes: Mapping[str, tuple[str, str]]) -> None:
    """{relative path: (expected current text, new text)}; nothing is written if a file no longer holds the
    expected text (changed by someone else since it was read)."""
    targets = {rel: root / rel for rel in changes}
    for rel, (expected, _new) in changes.items():
        if targets[rel].read_bytes().decode("utf-8") != expected:
            raise PatcherError(f"vllm/{rel} changed while the patcher was running; nothing was written")

    temps: dict[str, Path] = {}
    replaced: list[str] = []
    try:
        for rel, (_expected, new) in changes.items():
            try:
                temps[rel] = _write_temp(targets[rel], new)
            except OSError as exc:
                if exc.errno in _READ_ONLY_ERRNOS:
                    raise _not_writable(root, targets[rel].parent, exc) from exc
                raise PatcherError(f"cannot write next to {targets[rel]}: {exc}") from exc
        try:
            for rel, tmp in temps.items():
                os.replace(tmp, targets[rel])
                replaced.append(rel)
        except OSError as exc:
            for done in reversed(replaced):  # put back the originals of files already replaced, newest first
                os.replace(_write_temp(targets[done], changes[done][0]), targets[done])
            if exc.errno in _READ_ONLY_ERRNOS:
                raise _not_writable(root, targets[rel], exc) from exc
            raise PatcherError(f"cannot replace {targets[rel]}: {exc}; the tree was restored") from exc
    finally:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
