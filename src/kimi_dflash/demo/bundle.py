"""The cached demo bundle on disk: where it lives, whether a cached copy is complete, and building it atomically.

Layout under the root (default <cache_root()>/demo):
    bundle/manifest.json    fabrication version, sha256 of every other file, summary facts
    bundle/target/          HF model dir of the tiny Qwen3 target (tokenizer + chat template included)
    bundle/drafter/         HF-style dir of the DFlash drafter (config.json + model.safetensors)
A bundle is only ever moved into place whole (built in a temp dir beside it, then os.replace), and this
module only imports the standard library, so reusing a cached bundle costs a few milliseconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from kimi_dflash.demo import layout
from kimi_dflash.demo.encoding import json_bytes

BUNDLE = "bundle"
MANIFEST = "manifest.json"
LOCK = ".lock"


@dataclass(frozen=True)
class DemoModels:
    """Paths and facts the launcher and tests need to serve the demo."""

    root: Path
    target_dir: Path
    drafter_dir: Path
    manifest_path: Path
    fabrication_version: str = layout.FABRICATION_VERSION
    max_num_speculative_tokens: int = layout.MAX_NUM_SPECULATIVE_TOKENS
    recommended_num_speculative_tokens: int = 4
    max_model_len: int = layout.MAX_POSITION_EMBEDDINGS
    dtype: str = layout.TORCH_DTYPE
    cpu_block_size: int = 32  # --block-size: vLLM's CPU attention refuses sizes that are not a multiple of 32
    built: bool = False  # True when this call fabricated the files, False when a cached copy was reused

    def speculative_config(self, num_speculative_tokens: int | None = None) -> dict[str, object]:
        """The --speculative-config object for vLLM."""
        k = self.recommended_num_speculative_tokens if num_speculative_tokens is None else num_speculative_tokens
        if not 1 <= k <= self.max_num_speculative_tokens:
            raise ValueError(f"num_speculative_tokens={k}: the demo drafter proposes 1 to "
                             f"{self.max_num_speculative_tokens} tokens per step")
        return {"method": "dflash", "model": str(self.drafter_dir), "num_speculative_tokens": k}

    def manifest(self) -> dict[str, object]:
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))


def default_root() -> Path:
    from kimi_dflash.paths import cache_root

    return cache_root() / "demo"


def demo_model_paths(root: Path | None = None) -> DemoModels:
    """Where the demo models live (or will), without checking or building anything."""
    base = (root if root is not None else default_root()).expanduser().resolve()
    bundle = base / BUNDLE
    return DemoModels(root=base, target_dir=bundle / "target", drafter_dir=bundle / "drafter",
                      manifest_path=bundle / MANIFEST)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle_problem(bundle: Path) -> str | None:
    """Why the bundle at `bundle` cannot be reused, or None when it is complete and current."""
    manifest_path = bundle / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "not built yet"
    except (OSError, ValueError) as error:
        return f"unreadable manifest ({error})"
    version = manifest.get("fabrication_version") if isinstance(manifest, dict) else None
    if version != layout.FABRICATION_VERSION:
        return f"fabrication version {version!r}, this code makes {layout.FABRICATION_VERSION!r}"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "manifest lists no files"
    for relative, expected in files.items():
        path = bundle / relative
        if not path.is_file():
            return f"{relative} is missing"
        if sha256_file(path) != expected:
            return f"{relative} does not match its sha256"
    return None


def manifest_bytes(files: dict[str, bytes], summary: dict[str, object]) -> bytes:
    manifest = {
        "fabrication_version": layout.FABRICATION_VERSION,
        "files": {name: hashlib.sha256(content).hexdigest() for name, content in sorted(files.items())},
        "summary": summary,
    }
    return json_bytes(manifest)


def write_tree(directory: Path, files: dict[str, bytes]) -> None:
    for relative, content in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


@contextlib.contextmanager
def exclusive(root: Path) -> Iterator[None]:
    """Serialize builders (two launchers starting at once would otherwise race on the swap)."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / LOCK).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def install(root: Path, files: dict[str, bytes]) -> None:
    """Write a complete bundle beside the live one, then swap it in; the old one is removed afterwards."""
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        write_tree(staging, files)
        live = root / BUNDLE
        retired = None
        if live.exists():
            retired = Path(tempfile.mkdtemp(prefix=".retired-", dir=root))
            os.replace(live, retired / BUNDLE)
        os.replace(staging, live)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def ensure_demo_models(root: Path | None = None, force: bool = False,
                       progress: Callable[[str], None] | None = None) -> DemoModels:
    """Return the demo target + drafter, fabricating them first unless a complete, current copy is cached.

    `root` defaults to <cache_root()>/demo. `force` rebuilds even a valid copy. `progress` receives one-line
    status messages (the CLI prints them)."""
    say = progress or (lambda message: None)
    paths = demo_model_paths(root)
    bundle = paths.manifest_path.parent
    if not force and bundle_problem(bundle) is None:
        return paths
    with exclusive(paths.root):
        problem = "rebuild requested (--force)" if force else bundle_problem(bundle)
        if problem is None:  # another process finished it while we waited for the lock
            return paths
        say(f"fabricating the demo models in {bundle} ({problem})")
        from kimi_dflash.demo.fabricate import fabricate

        fabrication = fabricate(say)
        files = dict(fabrication.files)
        files[MANIFEST] = manifest_bytes(fabrication.files, fabrication.summary)
        install(paths.root, files)
    leftover = bundle_problem(bundle)
    if leftover is not None:
        raise RuntimeError(f"the freshly built demo bundle in {bundle} failed its own check: {leftover}")
    return replace(paths, built=True)
